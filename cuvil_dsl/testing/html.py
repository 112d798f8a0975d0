"""Replay reports for people (one self-contained HTML page) and for machines (JSON).

The page needs nothing but itself: CSS inline, plots as base64 PNGs drawn by matplotlib's Agg
canvas (no display, no pyplot state), so it can be attached to a CI run or mailed. One row per
case with a cell per check (hover for the message), two plots (each case's median against its
recording, with the measured noise and the regression limit; and against its budget), then every
check's full message per case, failed cases unfolded.
"""

from __future__ import annotations

import base64
import io
import json
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from cuvil_dsl.testing.case import CHECKS
from cuvil_dsl.testing.replay import ReplayReport

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; }
th { background: #f4f4f4; }
td.pass { background: #e3f6e5; color: #145a1f; } td.fail { background: #fbe3e3; color: #8a1010; font-weight: bold; }
td.na { color: #888; } td.case { font-family: ui-monospace, monospace; }
pre { background: #f8f8f8; padding: 8px; overflow-x: auto; white-space: pre-wrap; }
.summary.ok { color: #145a1f; } .summary.bad { color: #8a1010; } img { max-width: 100%; }
"""


def reports_json(reports: list[ReplayReport]) -> dict:
    """All replays as one JSON object: ``{created, passed, cases: [replay objects]}``."""
    return {
        "created": _now(),
        "passed": all(r.passed for r in reports),
        "cases": [r.to_json() for r in reports],
    }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def write_json(reports: list[ReplayReport], path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(reports_json(reports), indent=2) + "\n", encoding="utf-8")
    return target


def write_html(reports: list[ReplayReport], path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(reports), encoding="utf-8")
    return target


def render_html(reports: list[ReplayReport]) -> str:
    failed = [r for r in reports if not r.passed]
    state = "bad" if failed else "ok"
    summary = f"{len(reports)} case(s), {len(reports) - len(failed)} passed, {len(failed)} failed"
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>cuvil-dsl regression report</title>", f"<style>{_CSS}</style></head><body>",
        "<h1>cuvil-dsl regression report</h1>",
        f'<p class="summary {state}">{escape(summary)} &middot; {_now()}</p>',
        _table(reports),
        "<h2>Time</h2>", _plots(reports),
        "<h2>Details</h2>", *(_details(r) for r in reports),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _table(reports: list[ReplayReport]) -> str:
    head = "".join(f"<th>{name}</th>" for name in ("case", "backend", "rule", *CHECKS))
    rows = []
    for r in reports:
        by_name = {c.name: c for c in r.checks}
        cells = [f'<td class="case">{escape(r.case)}</td>', f"<td>{escape(r.backend)}</td>",
                 f'<td title="{escape(r.rule_reason)}">{escape(r.rule)}</td>']
        for name in CHECKS:
            check = by_name.get(name)
            if check is None:
                cells.append('<td class="na" title="not run">&ndash;</td>')
                continue
            css, text = {True: ("pass", "pass"), False: ("fail", "FAIL"), None: ("na", check.rule)}[check.passed]
            cells.append(f'<td class="{css}" title="{escape(check.message)}">{escape(text)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>\n" + "\n".join(rows) + "\n</table>"


def _details(r: ReplayReport) -> str:
    verdict = "unusable" if r.unusable else ("passed" if r.passed else "FAILED")
    lines = [f"rule: {r.rule}" + (f" ({r.rule_reason})" if r.rule_reason else "")]
    if r.unusable:
        lines.append(f"unusable case: {r.unusable}")
    for c in r.checks:
        mark = {True: "PASS", False: "FAIL", None: "-"}[c.passed]
        lines.append(f"{mark} {c.name} [{c.rule}]: {c.message}")
    return (f"<details{'' if r.passed else ' open'}><summary><code>{escape(r.case)}</code> {verdict}</summary>"
            f"<pre>{escape(chr(10).join(lines))}</pre></details>")


def _plots(reports: list[ReplayReport]) -> str:
    timed = [r for r in reports if r.timing is not None]
    if not timed:
        return "<p>No case was timed.</p>"
    images = {"time against the recording": _png(_ratio_figure([r for r in timed if r.verdict is not None])),
              "time against the budget": _png(_budget_figure(timed))}
    return "\n".join(f'<p><img alt="{alt}" src="data:image/png;base64,{data}"></p>'
                     for alt, data in images.items() if data)


def _figure(rows: int):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 1.2 + 0.32 * rows), layout="constrained")
    return figure, figure.add_subplot()


def _ratio_figure(reports: list[ReplayReport]):
    """Median / recorded median per case on a log axis (ratios multiply), the measured noise as an
    error bar, the regression limit (regress_pct + noise) as a black tick where it is judged."""
    if not reports:
        return None
    figure, ax = _figure(len(reports))
    for row, r in enumerate(reports):
        ratio, noise = r.verdict.ratio, r.verdict.noise
        check = r.check("time")
        ax.errorbar([ratio], [row], xerr=[[ratio - ratio / (1 + noise)], [ratio * noise]], fmt="o", capsize=3,
                    color=_color(check.passed if check else None))
        if r.verdict.limit is not None:
            ax.plot([r.verdict.limit], [row], marker="|", markersize=16, color="black")
    ax.set_yticks(range(len(reports)), [r.case for r in reports])
    ax.axvline(1.0, color="#555", linewidth=1)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("median / recorded median (log scale); black tick: regression limit")
    ax.set_title("time against the recording")
    return figure


def _budget_figure(reports: list[ReplayReport]):
    """Median per case in microseconds (log scale), the budget's p50 limit as a black tick."""
    figure, ax = _figure(len(reports))
    for row, r in enumerate(reports):
        check = r.check("budget")
        ax.plot([r.timing.median_us], [row], "o", color=_color(check.passed if check else None))
        if r.budget.get("p50_us"):
            ax.plot([r.budget["p50_us"]], [row], marker="|", markersize=16, color="black")
    ax.set_yticks(range(len(reports)), [r.case for r in reports])
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("median time per execution, us (log scale); black tick: budget p50_us "
                  "(judged on budget.backend only)")
    ax.set_title("time against the budget")
    return figure


def _color(passed: bool | None) -> str:
    return {True: "#5cb85c", False: "#d9534f", None: "#aaaaaa"}[passed]


def _png(figure) -> str | None:
    if figure is None:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
