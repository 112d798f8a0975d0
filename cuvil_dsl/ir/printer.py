"""The canonical text form of the IR: what goldens, dumps and `compile --emit ir` show.

    pipeline softmax_rows(x: f16[M, N]) -> (y: f16[M, N]) {
      y: f16[M, N] = softmax x {axis=1}
    }

Temporaries are ``%N``; named values are the user's bindings (rounded to their dtype).
"""

from __future__ import annotations

from cuvil_dsl.ir import nodes as ir


def _attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def format_op(op: ir.Op) -> str:
    attrs = ""
    if op.attrs:
        attrs = " {" + ", ".join(f"{k}={_attr(v)}" for k, v in op.attrs) + "}"
    args = (" " + ", ".join(op.args)) if op.args else ""
    return f"{op.out}: {op.type} = {op.op}{args}{attrs}"


def _format_param(p: ir.Param) -> str:
    text = f"{p.name}: {p.declared.value}"
    if isinstance(p.type, ir.TensorType):
        text = f"{p.name}: {p.type}"
    if p.default is not None:
        text += f" = {_attr(p.default)}"
    return text


def _lines(body, indent: int):
    pad = "  " * indent
    for stmt in body:
        if isinstance(stmt, ir.Op):
            yield pad + format_op(stmt)
        elif isinstance(stmt, ir.HostStmt):
            yield pad + (stmt.kind if stmt.arg is None else f"{stmt.kind} {stmt.arg}")
        else:
            yield f"{pad}{stmt.kind} {stmt.name} {{"
            yield from _lines(stmt.body, indent + 1)
            yield pad + "}"


def format_pipeline(p: ir.Pipeline) -> str:
    params = ", ".join(_format_param(x) for x in p.params)
    results = ", ".join(f"{r.name}: {r.type}" for r in p.results)
    lines = [f"pipeline {p.name}({params}) -> ({results}) {{"]
    for c in p.constraints:
        lines.append(f"  # requires {c.symbol} == {c.size} ({c.why}, {c.span.line}:{c.span.column})")
    lines.extend(_lines(p.body, 1))
    lines.append("}")
    return "\n".join(lines) + "\n"


def format_module(m: ir.Module) -> str:
    return "\n".join(format_pipeline(p) for p in m.pipelines)
