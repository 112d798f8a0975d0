"""YAML text to plain Python data, remembering where every key and value stands.

The text is composed with ``yaml.compose(..., Loader=yaml.SafeLoader)``: a node tree with
marks, and no Python object is ever constructed from a tag. This module walks the tree itself
and records, for every path (``("kernels", "qk_softmax", "block")``), the span of the key and
of the value, so every later stage can point a diagnostic at a YAML line.

What is accepted, and why:

- Mappings, lists and the scalar types of YAML's core schema (null, bool, int, float, str).
  Any other tag (``!!python/object``, ``!!binary``, ``!custom``, merge keys ``<<``) is an error
  (E508): a spec is plain data.
- Keys are taken as written (``1: x`` has the key ``"1"``): every spec key is a name.
- A plain scalar in exponent form such as ``1e-3`` is a number, as YAML 1.2 and every user
  expect; YAML 1.1, which PyYAML implements, would make it a string.
- A plain timestamp (``2024-01-01``) stays a string.
- A key given twice in one mapping is an error (E501) at the second one; the last one wins so
  the rest of the spec can still be checked.
- Nesting deeper than :data:`MAX_DEPTH` or more than :data:`MAX_VALUES` values (alias bombs,
  recursive aliases) is an error rather than a hang or a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import yaml
from yaml.constructor import SafeConstructor

from cuvil_dsl.diagnostics import Diagnostic, Span, UserError, error

MAX_DEPTH = 64
MAX_VALUES = 100_000

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_CORE}{name}" for name in ("null", "bool", "int", "float", "str")}
_EXPONENT_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+")

KeyPath = tuple  # tuple[str | int, ...]: keys of mappings and indices of lists, from the top


@dataclass(frozen=True)
class Positions:
    """Spans of every key and value of a spec, by path; lists' items have no key of their own."""

    file: str
    keys: Mapping[KeyPath, Span]
    values: Mapping[KeyPath, Span]

    def span_of(self, path: KeyPath, key: bool = True) -> Span:
        """The span of ``path``'s key (or value), else of its nearest parent, else the file start."""
        table = self.keys if key else self.values
        for end in range(len(path), 0, -1):
            span = table.get(path[:end]) or self.values.get(path[:end])
            if span is not None:
                return span
        return Span.whole_file(self.file)


@dataclass(frozen=True)
class YamlTree:
    """Plain data from a spec, with positions and the problems found while reading it.

    ``bad_paths`` are values that could not be read (an unsupported tag): they are ``None`` in
    ``data`` and validation errors at or under them are not reported again.
    """

    data: dict
    positions: Positions
    problems: tuple[Diagnostic, ...]
    bad_paths: frozenset


class _Abort(Exception):
    """The tree cannot be walked any further (too deep, too large); carries the diagnostic."""

    def __init__(self, diagnostic: Diagnostic):
        self.diagnostic = diagnostic


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag


class _Walker:
    def __init__(self, file: str):
        self.file = file
        self.keys: dict[KeyPath, Span] = {}
        self.values: dict[KeyPath, Span] = {}
        self.problems: list[Diagnostic] = []
        self.bad: set[KeyPath] = set()
        self.count = 0
        self.scalars = SafeConstructor()

    def span(self, node: yaml.Node) -> Span:
        start, end = node.start_mark, node.end_mark
        return Span(self.file, start.line + 1, start.column + 1, end.line + 1, end.column + 1)

    def walk(self, node: yaml.Node, path: KeyPath) -> Any:
        self.values[path] = self.span(node)
        self.count += 1
        if self.count > MAX_VALUES:
            raise _Abort(error("E508", f"the spec holds more than {MAX_VALUES} values (aliases?)", self.span(node)))
        if len(path) > MAX_DEPTH:
            raise _Abort(error("E508", f"the spec is nested more than {MAX_DEPTH} levels deep", self.span(node)))
        if isinstance(node, yaml.MappingNode) and node.tag == f"{_CORE}map":
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode) and node.tag == f"{_CORE}seq":
            return [self.walk(item, path + (i,)) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        return self.refuse(node, path)

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in _SCALAR_TAGS:
                what = "merge keys (<<) are" if key_node.tag == f"{_CORE}merge" else "this key is"
                self.problems.append(
                    error("E508", f"{what} not supported: a spec's keys are plain names", self.span(key_node))
                )
                continue
            key = key_node.value
            key_path = path + (key,)
            if key in out:
                first = self.keys[key_path]
                self.problems.append(
                    error(
                        "E501",
                        f"duplicate key `{key}` (first given at line {first.line})",
                        self.span(key_node),
                        hint="remove one of them",
                    )
                )
            self.keys[key_path] = self.span(key_node)
            out[key] = self.walk(value_node, key_path)
        return out

    def scalar(self, node: yaml.ScalarNode, path: KeyPath) -> Any:
        plain = node.style is None
        if node.tag == f"{_CORE}timestamp" and plain:
            return node.value
        if node.tag not in _SCALAR_TAGS:
            return self.refuse(node, path)
        if node.tag == f"{_CORE}str":
            if plain and _EXPONENT_NUMBER.fullmatch(node.value):
                return float(node.value.replace("_", ""))
            return node.value
        kind = node.tag[len(_CORE) :]
        try:
            return getattr(self.scalars, f"construct_yaml_{kind}")(node)
        except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError):  # explicit tags on odd text
            self.problems.append(error("E508", f"cannot read {node.value!r} as !!{kind}", self.span(node)))
            self.bad.add(path)
            return None

    def refuse(self, node: yaml.Node, path: KeyPath) -> None:
        self.problems.append(
            error(
                "E508",
                f"YAML tag `{_show_tag(node.tag)}` is not allowed in a spec",
                self.span(node),
                hint="a spec holds plain data: numbers, strings, true/false, lists and mappings",
            )
        )
        self.bad.add(path)
        return None


def _syntax_error(exc: yaml.YAMLError, text: str, file: str) -> Diagnostic:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        span = Span.point(file, mark.line + 1, mark.column + 1)
        problem = exc.problem or "invalid YAML"
        context = getattr(exc, "context", None)
        return error("E100", f"YAML syntax error: {problem}" + (f" ({context})" if context else ""), span)
    # A ReaderError (a control character) carries an offset instead of a mark.
    position = getattr(exc, "position", 0)
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    reason = getattr(exc, "reason", None) or "unreadable text"
    return error("E100", f"YAML syntax error: {reason}", Span.point(file, line, column))


def parse_yaml(text: str, file: str) -> YamlTree:
    """Read a spec's text into plain data with positions.

    Raises :class:`UserError` when nothing can be checked: a YAML syntax error (E100), an empty
    document or a top level that is not a mapping (E508), nesting or aliases out of bounds.
    Problems with single values are returned in ``problems`` so they are reported with the rest.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise UserError([_syntax_error(exc, text, file)]) from None
    except RecursionError:
        raise UserError([error("E508", "the spec is nested too deeply", Span.whole_file(file))]) from None
    if root is None:
        raise UserError(
            [error("E508", "the spec is empty", Span.whole_file(file), hint="start with `pipeline: FILE.cuvil`")]
        )
    walker = _Walker(file)
    if not (isinstance(root, yaml.MappingNode) and root.tag == f"{_CORE}map"):
        raise UserError(
            [
                error(
                    "E508",
                    "a spec is a mapping of keys to values at its top level",
                    walker.span(root),
                    hint="start with `pipeline: FILE.cuvil`",
                )
            ]
        )
    try:
        data = walker.walk(root, ())
    except _Abort as abort:
        raise UserError([abort.diagnostic]) from None
    positions = Positions(file, walker.keys, walker.values)
    return YamlTree(data, positions, tuple(walker.problems), frozenset(walker.bad))
