"""Human-readable reports: the table `cuvil-dsl run` prints."""

from __future__ import annotations

import math

from cuvil_dsl.driver import RunReport


def _fmt_us(value: float | None, in_ms: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if in_ms:
        return f"{value / 1000:.2f} ms"
    return f"{value:.1f} us"


def table(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for r in rows:
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return lines


def _mark(passed: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "-"}[passed]


def format_run(report: RunReport) -> str:
    lines = [f"{report.pipeline}  backend={report.backend}  spec={report.spec_file}"]
    if report.kernels:
        lines.append("kernels")
        rows = []
        for k in report.kernels:
            rows.append([
                k.name,
                "-" if k.registers is None else str(k.registers),
                "-" if k.spill_bytes is None else str(k.spill_bytes),
                "-" if k.cache_hit is None else ("hit" if k.cache_hit else "miss"),
                "-" if k.compile_ms is None else f"{k.compile_ms:.0f} ms",
            ])
        lines += table(["name", "registers", "spill", "cache", "compile"], rows)
    if report.failure:
        lines.append(f"FAILED  {report.failure}")
        return "\n".join(lines)
    lines.append(f"check   [{_mark(report.check_passed)}]" + (f" {report.check_note}" if report.check_note else ""))
    for c in report.comparisons:
        lines.append("  " + c.describe())
    if report.timing is not None:
        t = report.timing
        ms = t.p50_us >= 10_000  # one unit for the whole line, chosen by the median
        lines.append(
            f"timing  p50 {_fmt_us(t.p50_us, ms)}  p99 {_fmt_us(t.p99_us, ms)}  mean {_fmt_us(t.mean_us, ms)}  "
            f"std {_fmt_us(t.std_us, ms)}  ({t.iterations} iterations)"
        )
    lines.append(f"budget  [{_mark(report.budget_passed)}]" + (f" {report.budget_note}" if report.budget_note else ""))
    for b in report.budget_items:
        value = "-" if b.value is None else (f"{b.value:g}")
        lines.append(f"  {b.name}: {value} (limit {b.limit:g}) {_mark(b.passed)}")
    return "\n".join(lines)
