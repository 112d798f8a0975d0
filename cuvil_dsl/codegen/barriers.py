"""A check on rendered CUDA C: every block barrier stands in block-uniform control flow.

A ``__syncthreads()`` that some threads of a block skip deadlocks or corrupts shared memory.
The templates put barriers only at fixed points (between GEMM pipeline steps, between row
phases); this check proves it on the text, so a template change that breaks the rule fails
the tests. Per function it finds the *per-thread* variables (anything computed from
``threadIdx`` or the lane id, transitively through assignments), then reports a barrier whose
enclosing ``if``/``for``/``while``/``else`` conditions, or whose own unbraced ``if``, mention
one, and a barrier that follows a ``return`` taken under such a condition.
"""

from __future__ import annotations

import re

_BARRIER = re.compile(r"\b__syncthreads(?:_count|_and|_or)?\s*\(|\bbar(?:rier)?\.sync\b|\bbarrier\.cluster\b"
                      r"|\bcvl_cluster_sync\s*\(")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# `name`, `name[i]`, `name.member` or `name->member` assigned (the base name is what becomes per-thread)
_ASSIGN = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*(?:(?:\[[^\]]*\]|(?:\.|->)\s*[A-Za-z_]\w*)\s*)*"
                     r"(?:[-+*/%&|^]|<<|>>)?=(?!=)([^;{}]*)")
_CONTROL = re.compile(r"^\s*(?:\}\s*)?(else\s+if|if|for|while|switch|else)\b")
_SEEDS = {"threadIdx", "laneid", "lane", "lane_id"}
_MEMBER = re.compile(r"(?:\.|->)\s*[A-Za-z_]\w*")  # `.x` of blockIdx.x is not a variable named x


_ASM = re.compile(r'\basm\s*(?:volatile\s*)?\((?:[^()"]|"(?:\\.|[^"\\])*"|\([^()]*\))*\)')


def _strip(source: str) -> str:
    """Comments, string literals and preprocessor lines blanked; an ``asm`` statement that
    holds ``bar.sync`` becomes a ``__syncthreads()``."""
    def asm(m: re.Match) -> str:
        text = m.group(0)
        return "__syncthreads()" + " " * (len(text) - 15) if _BARRIER.search(text) else text

    text = _ASM.sub(asm, source)
    text = re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', lambda m: re.sub(r"[^\n]", " ", m.group(0)), text,
                  flags=re.S)
    return re.sub(r"^[ \t]*#[^\n]*", lambda m: " " * len(m.group(0)), text, flags=re.M)


def _functions(text: str) -> list[tuple[int, int]]:
    """(start, end) of every top-level brace block (function bodies, struct bodies)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                out.append((start, i + 1))
    return out


def _names(text: str) -> set[str]:
    """The variables ``text`` mentions (member names after ``.`` or ``->`` left out)."""
    return set(_IDENT.findall(_MEMBER.sub(" ", text)))


def _per_thread(body: str) -> set[str]:
    tainted = set(_SEEDS)
    changed = True
    while changed:
        changed = False
        for m in _ASSIGN.finditer(body):
            name, expr = m.group(1), m.group(2)
            if name not in tainted and tainted & _names(expr):
                tainted.add(name)
                changed = True
    return tainted


def _uses(text: str, tainted: set[str]) -> set[str]:
    return tainted & _names(text)


def _check_function(text: str, offset: int, source: str, problems: list[str]) -> None:
    tainted = _per_thread(text)
    stack: list[tuple[str, bool]] = []  # (header, per-thread?) of each open block
    closed_if: dict[int, bool] = {}  # depth -> whether the last closed `if` there was per-thread
    divergent_return = False
    start, paren = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        if paren:
            continue
        if ch == "{":
            header = text[start:i].strip()
            stack.append((header, _header_per_thread(header, tainted, closed_if.get(len(stack), False))))
            start = i + 1
        elif ch == "}":
            header, flag = stack.pop() if stack else ("", False)
            closed_if[len(stack)] = flag if re.match(r"(?:\}\s*)?(?:else\s+)?if\b", header) else False
            start = i + 1
        elif ch == ";":
            statement = text[start:i]
            under = any(f for _h, f in stack) or _header_per_thread(statement, tainted, False)
            if re.search(r"\breturn\b", statement) and under:
                divergent_return = True
            if _BARRIER.search(statement):
                line = source.count("\n", 0, offset + i) + 1
                why = [h for h, f in stack if f] or ([statement.strip()] if under else [])
                if why:
                    names = ", ".join(sorted(_uses(" ".join(why), tainted)))
                    problems.append(f"line {line}: barrier under `{why[-1][:80]}`, which depends on per-thread "
                                    f"values ({names})")
                elif divergent_return:
                    problems.append(f"line {line}: barrier after a `return` that only some threads take")
            start = i + 1


def _header_per_thread(header: str, tainted: set[str], previous_if: bool) -> bool:
    m = _CONTROL.match(header)
    if not m:
        return False
    if m.group(1) == "else":
        return previous_if
    return bool(_uses(header, tainted))


def check_barriers_uniform(source: str) -> list[str]:
    """Problems found (empty when every barrier is in block-uniform control flow).

    >>> check_barriers_uniform("__global__ void k() { if (threadIdx.x < 16) __syncthreads(); }")[0][:30]
    'line 1: barrier under `if (thre'
    """
    text = _strip(source)
    problems: list[str] = []
    for start, end in _functions(text):
        _check_function(text[start:end], start, text, problems)
    return problems
