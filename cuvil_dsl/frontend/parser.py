"""Source text to AST, with E100 diagnostics instead of Lark exceptions.

The grammar is ``grammars/cuvil.lark``, shipped inside the package. Recovery: after a syntax
error inside a block, the offending statement is blanked out (columns kept) and the file is
parsed again, so one run reports one E100 per bad statement. Names bound by a blanked
statement are returned as *poisoned* so the checker does not report their uses as undefined.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lark import Lark, Token, Tree, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.exceptions import VisitError

from cuvil_dsl import knobs
from cuvil_dsl.diagnostics import SOURCES, read_source_bytes, CuvilError, Diagnostic, InternalError, Span, error
from cuvil_dsl.frontend import ast
from cuvil_dsl.frontend.transformer import ToAst

MAX_RECOVERIES = 64
# Recovery reparses the text after blanking each bad statement; it stops once the parses
# together have read more characters (each up to where it failed) than the file holds
# (at least MIN_RECOVERY_CHARS, at most MAX_RECOVERY_CHARS). A file whose errors lie far apart
# is thus read about twice at most: the check stays linear in the file's size (a fixed 2 MB
# budget parsed a 250 KB file eight times, 14 s) and small files still get every error.
MAX_RECOVERY_CHARS = 2_000_000
MIN_RECOVERY_CHARS = 200_000


def recovery_budget(size: int) -> int:
    """Characters recovery may reparse in a file of ``size`` characters."""
    return min(MAX_RECOVERY_CHARS, max(MIN_RECOVERY_CHARS, size))
# Deepest parse-tree nesting accepted (expressions, calls, blocks). Every later stage walks
# the tree recursively; beyond this, input such as 10,000 nested parentheses would exhaust
# Python's stack. Like Python's own parser, too deep a nesting is a syntax error (E100).
MAX_NESTING = 200


def grammar_text() -> str:
    """The grammar from the installed package (wheel), or from the source tree (editable)."""
    try:
        packaged = resources.files("cuvil_dsl").joinpath("grammars", "cuvil.lark")
        if packaged.is_file():
            return packaged.read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):  # pragma: no cover - depends on install kind
        pass
    source_tree = Path(__file__).resolve().parents[2] / "grammars" / "cuvil.lark"
    return source_tree.read_text(encoding="utf-8")


class BracketNewlines:
    """Post-lexer: newlines inside ( ) and [ ] are not statement ends. Tolerates unbalanced input."""

    always_accept = ("_NL",)

    def process(self, stream):
        depth = 0
        for tok in stream:
            if tok.type == "_NL":
                if depth > 0:
                    continue
            elif tok.value in ("(", "["):
                depth += 1
            elif tok.value in (")", "]"):
                depth = max(0, depth - 1)
            elif tok.value in ("{", "}"):
                depth = 0  # a brace always ends any bracket left open before it
            yield tok


@functools.lru_cache(maxsize=None)
def make_parser(strict: bool = False) -> Lark:
    return Lark(
        grammar_text(),
        parser="lalr",
        lexer="basic",
        propagate_positions=True,
        postlex=BracketNewlines(),
        maybe_placeholders=True,
        strict=strict,
        cache=False if strict else _parser_cache_file(),
    )


def _parser_cache_file() -> str | bool:
    """Lark's analysed grammar, kept in our user-only cache directory (it halves start-up).

    Lark checks a hash of the grammar and options before using the file. Never the shared
    temp directory: the file is a pickle, so only a directory that is ours may hold it.
    """
    try:
        root = knobs.values.cache_dir
        if knobs.values.disable_cache:
            return False
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
        path = root / "lark-cuvil.cache"
        # Lark unpickles the file before it checks its hash: only a plain file of ours is used,
        # never a symlink or someone else's file planted under the name.
        own = os.lstat(path)
        if not stat.S_ISREG(own.st_mode) or own.st_uid != os.getuid() or own.st_mode & 0o022:
            return False
    except FileNotFoundError:
        return str(root / "lark-cuvil.cache")  # Lark creates it
    except (OSError, CuvilError):
        return False
    return str(path)


@dataclass(frozen=True)
class ParseResult:
    source: ast.SourceFile | None
    diagnostics: tuple[Diagnostic, ...]
    poisoned: frozenset[str]


_FRIENDLY = {
    "_NL": "end of line",
    "$END": "end of file",
    "NAME": "a name",
    "NUMBER": "a number",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "COMMA": "`,`",
    "COLON": "`:`",
    "SEMICOLON": "`;`",
    "EQUAL": "`=`",
    "CMP_OP": "a comparison",
    "DOT_T": "`.T`",
}


def _describe(tok: Token) -> str:
    if tok.type in ("_NL", "$END"):
        return _FRIENDLY[tok.type]
    return f"`{tok.value}`"


def _expected(e: UnexpectedInput) -> str:
    names = sorted(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())
    shown = []
    for n in names:
        if n in _FRIENDLY:
            shown.append(_FRIENDLY[n])
        elif n.startswith("__ANON") or n.isupper():
            pattern = make_parser().get_terminal(n).pattern
            shown.append(f"`{pattern.value}`" if pattern.type == "str" else n.lower())
    shown = list(dict.fromkeys(shown))
    if not shown:
        return ""
    if len(shown) > 6:
        shown = shown[:6] + ["..."]
    return "expected " + ", ".join(shown)


def _syntax_diagnostic(path: str, text: str, e: UnexpectedInput) -> Diagnostic:
    if isinstance(e, UnexpectedCharacters):
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        before = text[: e.pos_in_stream]
        digits = re.search(r"\d+$", before)
        if ch == "." and digits:
            # `2.` or `1.e5`: point at the whole malformed number, not at its dot.
            tail = re.match(r"\.[A-Za-z0-9_]*(?:(?<=[eE])[+-]?\d+)?", text[e.pos_in_stream :])
            width = len(digits.group()) + (len(tail.group()) if tail else 1)
            start = e.column - len(digits.group())
            literal = text[e.pos_in_stream - len(digits.group()) : e.pos_in_stream - len(digits.group()) + width]
            return error("E100", f"`{literal}` is not a number", Span.point(path, e.line, start, width),
                         "write a digit after the point: `2.0`, `1.0e5`")
        return error("E100", f"unexpected character {ch!r}", Span.point(path, e.line, e.column))
    tok: Token = e.token  # type: ignore[attr-defined]
    if tok.type == "$END" or isinstance(e, UnexpectedEOF):
        span = Span.point(path, max(1, text.count("\n") + 1), 1)
        return error("E100", "unexpected end of file", span)
    span = Span(path, tok.line, tok.column, tok.end_line or tok.line, tok.end_column or tok.column + 1)
    if tok.type == "_NL":
        span = Span.point(path, tok.line, tok.column)
    hint = None
    expected = set(getattr(e, "expected", ()) or ())
    if tok.type == "CMP_OP" and "CMP_OP" not in expected:
        msg = f"comparisons do not chain: unexpected {_describe(tok)}"
        hint = "combine comparisons with `&`: `(a < b) & (b < c)`"
        return error("E100", msg, span, hint)
    if tok.value in (")", "]") and _previous_char(text, tok) == ",":
        return error("E100", "trailing comma is not allowed", span, "remove the comma before it")
    if tok.type == "_NL" and "LBRACE" in expected:
        hint = "a `{` stands at the end of its header's line"
    exp = _expected(e)
    return error("E100", f"unexpected {_describe(tok)}" + (f"; {exp}" if exp else ""), span, hint)


def _previous_char(text: str, tok: Token) -> str:
    i = tok.start_pos - 1
    while i >= 0 and text[i] in " \t\r\n":
        i -= 1
    return text[i] if i >= 0 else ""


def _scan_structure(text: str):
    """Yield (kind, pos) for braces, bracket depth changes and statement ends, skipping comments."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        yield c, i
        i += 1


def _statement_region(text: str, pos: int) -> tuple[int, int] | None:
    """The [start, end) of the statement holding ``pos``, if it lies inside a block body."""
    depth_brace = 0
    depth_paren = 0
    start = None
    for c, i in _scan_structure(text):
        if i >= pos:
            break
        if c == "{":
            depth_brace += 1
            depth_paren = 0
            start = i + 1
        elif c == "}":
            depth_brace -= 1
            depth_paren = 0
            start = i + 1
        elif c in "([":
            depth_paren += 1
        elif c in ")]":
            depth_paren = max(0, depth_paren - 1)
        elif (c == "\n" and depth_paren == 0) or c == ";":
            start = i + 1
    if depth_brace <= 0 or start is None:
        return None
    depth_paren = 0
    end = len(text)
    for c, i in _scan_structure(text[start:]):
        if c in "([":
            depth_paren += 1
        elif c in ")]":
            depth_paren = max(0, depth_paren - 1)
        elif c in "{}":
            if i + start < pos:
                return None  # the statement opens or closes a block: blanking it would cascade
            end = start + i
            break
        elif (c == "\n" and depth_paren == 0) or c == ";":
            if start + i >= pos:
                end = start + i
                break
    return start, end


def _unclosed_brace(text: str) -> int | None:
    """Position of the `{` most likely left open: indentation decides between candidates."""
    stack: list[int] = []
    mismatched: int | None = None
    for c, i in _scan_structure(text):
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            opened = stack.pop()
            if mismatched is None and _indent_of(text, i) < _indent_of(text, opened) and stack:
                mismatched = opened
    if not stack:
        return None
    return mismatched if mismatched is not None else stack[-1]


def _indent_of(text: str, pos: int) -> int:
    line_start = text.rfind("\n", 0, pos) + 1
    k = line_start
    while k < len(text) and text[k] in " \t":
        k += 1
    return k - line_start if k < pos else pos - line_start


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + "".join(ch if ch in "\r\n" else " " for ch in text[start:end]) + text[end:]


_STATEMENTS = frozenset(("assign", "graph_block", "kernel_block", "sync_stmt", "host_call", "pipeline"))


def _too_deep(tree: Tree, path: str) -> list[Diagnostic]:
    """E100 for each statement whose parse tree nests deeper than :data:`MAX_NESTING`.

    Walks the tree with an explicit stack (the tree may be far deeper than Python's recursion
    limit) and reports the first node past the limit in each statement, at that node.
    """
    diags: list[Diagnostic] = []
    reported: set[int] = set()
    stack: list[tuple[Tree, int, int]] = [(tree, 1, 0)]
    while stack:
        node, depth, statement = stack.pop()
        if node.data in _STATEMENTS:
            statement = id(node)
        if depth > MAX_NESTING:
            if statement not in reported:
                reported.add(statement)
                meta = node.meta
                line, column = (meta.line, meta.column) if not meta.empty else (1, 1)
                diags.append(error(
                    "E100", f"nested too deeply: more than {MAX_NESTING} levels of expressions or blocks",
                    Span.point(path, line, column), "split the expression into named steps"))
            continue
        for child in node.children:
            if isinstance(child, Tree):
                stack.append((child, depth + 1, statement))
    return sorted(diags, key=Diagnostic.sort_key)


def parse_source(text: str, path: str) -> ParseResult:
    """Parse ``text`` (the contents of ``path``); never raises for bad input."""
    SOURCES.add(path, text)
    diags: list[Diagnostic] = []
    poisoned: set[str] = set()
    reported_lines: set[int] = set()
    current = text
    parsed_chars = 0
    budget = recovery_budget(len(text))
    for _ in range(MAX_RECOVERIES):
        if parsed_chars > budget:
            break
        try:
            tree = make_parser().parse(current)
        except UnexpectedInput as e:
            parsed_chars += _error_pos(current, e)
            at_end = isinstance(e, UnexpectedEOF) or (
                isinstance(e, UnexpectedToken) and e.token.type == "$END"
            )
            if at_end:
                brace = _unclosed_brace(current)
                if brace is not None:
                    line, col = _line_col(current, brace)
                    diags.append(
                        error(
                            "E100",
                            "unclosed block: this `{` has no matching `}`",
                            Span.point(path, line, col),
                            "add the missing `}`",
                        )
                    )
                else:
                    diags.append(_syntax_diagnostic(path, current, e))
                break
            diag = _syntax_diagnostic(path, current, e)
            if diag.span.line not in reported_lines:
                diags.append(diag)
                reported_lines.add(diag.span.line)
            pos = _error_pos(current, e)
            region = _statement_region(current, pos)
            if region is None:
                break
            start, end = region
            target = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)", current[start:end])
            if target:
                poisoned.add(target.group(1))
            current = _blank(current, start, end)
            continue
        deep = _too_deep(tree, path)
        if deep:
            return ParseResult(None, tuple(sorted(diags + deep, key=Diagnostic.sort_key)), frozenset(poisoned))
        try:
            source = ToAst(path).transform(tree)
        except VisitError as exc:  # a bug in the transformer, not the user's fault
            raise InternalError(f"AST construction failed: {exc.orig_exc!r}") from exc.orig_exc
        if diags:
            return ParseResult(None, tuple(diags), frozenset(poisoned))
        return ParseResult(source, (), frozenset())
    return ParseResult(None, tuple(diags), frozenset(poisoned))


def _error_pos(text: str, e: UnexpectedInput) -> int:
    if isinstance(e, UnexpectedCharacters):
        return e.pos_in_stream
    tok = getattr(e, "token", None)
    if tok is not None and tok.start_pos is not None:
        return tok.start_pos
    return len(text)


def parse_file(path: str | Path) -> ParseResult:
    p = Path(path)
    raw = read_source_bytes(p)
    if isinstance(raw, str):
        return ParseResult(None, (error("E505", raw, Span.whole_file(str(p))),), frozenset())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return ParseResult(None, (error("E100", "source is not valid UTF-8", Span.point(str(p), line, col)),), frozenset())
    return parse_source(text, str(p))
