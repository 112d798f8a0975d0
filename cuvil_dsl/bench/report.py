"""The bench report: one JSON document, and the table and the plot drawn from it.

Everything is rendered *from the document*, not from live objects, so a saved ``--json`` output
(for example a GPU session's) gives back the same table and plot on any machine.

Document shape (``--json``)::

    {date, backend, device: {...}, versions: {...}, method: {...}, ceilings: {...} | null,
     benchmarks: [{name, spec, pipeline, backend, kind, check: {passed, results},
                   floor: {bytes, flops, memory_us, compute_us, floor_us, bound},
                   contenders: {NAME: {label, device, status, median_us, iqm_us, iqr_us, spread, min_us,
                                       samples, e2e_p50_us, e2e_samples, step_us, rounds_us, clock, check,
                                       reason, note}},
                   ours_over_floor, best_baseline, best_baseline_over_ours,
                   best_baseline_over_ours_rounds}
                  | {name, spec, error}],
     exit_code}

plus ``runs`` in a report merged from saved runs and ``comparison`` with ``--compare``
(:mod:`cuvil_dsl.bench.saved`); the plot marks ours' earlier time from the latter.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import math
import platform
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from cuvil_dsl import __version__

if TYPE_CHECKING:
    from cuvil_dsl.bench.runner import Bench, BenchResult

ORDER = ("ours", "cupy", "torch", "torch_compile", "triton", "numpy")
METHOD = {
    "device_time": "CUDA events per sample on the contender's stream; a 2x-L2 buffer cleared by memset on that "
                   "stream before each sample, outside the events; samples queued back to back, one wait at the end; "
                   "a benchmark's GPU contenders timed in interleaved rounds (each once a round, the order rotated by one "
                   "each round), "
                   "samples pooled; median, interquartile mean and IQR/median, each round's median kept",
    "host_time": "perf_counter around each synchronous call after a warm-up; median and IQR/median",
    "e2e": "wall clock of the call plus a device synchronisation, from a flushed idle device; median",
    "floor": "max(input+result bytes / measured copy bandwidth, matmul flops / measured matrix rate)",
}
_DISTS = {"numpy": ("numpy",), "numba": ("numba",), "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
          "torch": ("torch",), "triton": ("triton",), "matplotlib": ("matplotlib",)}


def versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported)."""
    out: dict[str, str | None] = {"cuvil-dsl": __version__, "python": platform.python_version()}
    for key, dists in _DISTS.items():
        out[key] = None
        for dist in dists:
            try:
                out[key] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def device_description(backend: str) -> dict:
    """The GPU (cuda backend) or the host CPU the numbers come from."""
    info: dict = {"host": platform.node(), "cpu": platform.processor() or platform.machine()}
    if backend != "cuda":
        return info
    try:
        from cupy.cuda import runtime

        from cuvil_dsl.runtime.device import device_info

        gpu = device_info(0)
        info.update(gpu=gpu.name, arch=gpu.arch, sm_count=gpu.sm_count, l2_bytes=gpu.l2_bytes,
                    driver=runtime.driverGetVersion(), runtime=runtime.runtimeGetVersion())
    except Exception as exc:  # describe what is missing rather than fail the report
        info["gpu_error"] = repr(exc)
    return info


def benchmark_json(result: "BenchResult") -> dict:
    ours = result.entry("ours")
    ours_us = ours.median_us if ours is not None and ours.status in ("ok", "wrong") else None
    floor_us = result.floor.floor_us if result.floor is not None else None
    timed = [e for e in result.entries if e.name != "ours" and e.status == "ok" and e.median_us]
    best = min(timed, key=lambda e: e.median_us) if timed else None
    out = {
        "name": result.name,
        "spec": result.spec,
        "pipeline": result.pipeline,
        "backend": result.backend,
        "kind": result.kind,
        "check": {"passed": result.check_passed, "results": {c.name: c.to_json() for c in result.comparisons}},
        "floor": result.floor.to_json() if result.floor is not None else None,
        "contenders": {e.name: e.to_json() for e in result.entries},
        "ours_over_floor": _ratio(ours_us, floor_us),
        "best_baseline": best.name if best else None,
        "best_baseline_over_ours": _ratio(best.median_us if best else None, ours_us),
        "best_baseline_over_ours_rounds": _round_ratios(best, ours),
    }
    if result.baseline_note:
        out["baseline_note"] = result.baseline_note
    if result.failure:
        out["failure"] = result.failure
    return out


def _round_ratios(best, ours) -> list[float | None]:
    """The best baseline's time over ours in each interleaved round (empty without rounds): a
    comparison that holds in every round does not depend on the order the contenders ran in."""
    if best is None or ours is None or ours.measurement is None or best.measurement is None:
        return []
    theirs, mine = best.measurement.rounds_us, ours.measurement.rounds_us
    if len(theirs) != len(mine):
        return []
    return [_ratio(t, o) for t, o in zip(theirs, mine)]


def _ratio(num: float | None, den: float | None) -> float | None:
    return float(f"{num / den:.4g}") if num and den else None  # four significant digits


def document(results: list, bench: "Bench", exit_code: int, unusable: list[dict] = ()) -> dict:
    """The whole run as one JSON-able object; ``unusable`` holds ``{name, spec, error}`` for specs
    that could not be benchmarked (a compile failure)."""
    return _finite({
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "backend": bench.backend,
        "device": device_description(bench.backend),
        "versions": versions(),
        "method": {**METHOD, "settings": asdict(bench.settings)},
        "ceilings": bench.ceilings.to_json() if bench.ceilings is not None else None,
        "benchmarks": [benchmark_json(r) for r in results] + list(unusable),
        "exit_code": exit_code,
    })


def _finite(value):
    """``value`` with every NaN or infinity (a check's max_abs against a NaN) as None: strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# ---------------------------------------------------------------------------- table
def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.1f}"


def _us2(value: float | None) -> str:
    """Two decimals: an interquartile mean resolves below the clock's step."""
    return "-" if value is None else f"{value:.2f}"


def _cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    status = entry["status"]
    if status == "ok":
        return _us(entry.get("median_us"))
    if status == "wrong" and entry.get("median_us") is not None:  # ours, timed although wrong
        return f"{_us(entry['median_us'])} WRONG"
    return {"wrong": "wrong", "error": "error", "unavailable": "n/a", "failed": "FAILED"}.get(status, status)


def baseline_columns(doc: dict) -> list[tuple[str, str]]:
    """``(name, label)`` of the baselines with a result in some benchmark, in a fixed order."""
    seen: dict[str, str] = {}
    for bench in doc["benchmarks"]:
        for name, entry in bench.get("contenders", {}).items():
            if name != "ours" and entry["status"] != "unavailable":
                seen.setdefault(name, entry["label"])
    return sorted(seen.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))


def format_table(doc: dict) -> str:
    """The summary (Markdown): per benchmark ours, each baseline and the floor in microseconds,
    ours over the floor and the best baseline over ours (above 1: ours is faster); then the spread
    and end-to-end latency of every contender, and notes on what was not timed and why."""
    columns = baseline_columns(doc)
    head = ["benchmark", "ours us", *[f"{label} us" for _, label in columns], "floor us", "ours/floor",
            "best baseline/ours"]
    lines = [_ceilings_line(doc), "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bench in doc["benchmarks"]:
        if "error" in bench:
            lines.append(f"| {bench['name']} | not run | " + " | ".join("-" for _ in head[2:]) + " |")
            continue
        contenders = bench["contenders"]
        floor = (bench.get("floor") or {}).get("floor_us")
        best = bench.get("best_baseline")
        best_ratio = bench.get("best_baseline_over_ours")
        best_text = f"{best_ratio:.2f} ({contenders[best]['label']})" if best and best_ratio else "-"
        per_round = [r for r in bench.get("best_baseline_over_ours_rounds") or [] if r]
        if best_text != "-" and len(per_round) > 1:
            best_text += f"; rounds {min(per_round):.3f}-{max(per_round):.3f}"
        ratio = bench.get("ours_over_floor")
        lines.append("| " + " | ".join([bench["name"], _cell(contenders.get("ours")),
                                        *[_cell(contenders.get(name)) for name, _ in columns],
                                        _us(floor), "-" if ratio is None else f"{ratio:.2f}", best_text]) + " |")
    lines += ["", "| benchmark | contender | median us | IQ mean us | rounds (median us) | spread | samples | step us "
              "| e2e p50 us | check |", "|---|---|---|---|---|---|---|---|---|---|"]
    for bench in doc["benchmarks"]:
        for name, entry in bench.get("contenders", {}).items():
            if entry.get("median_us") is None:
                continue
            spread = entry.get("spread")
            check = entry.get("check") or {}
            rounds = " / ".join(_us(r) for r in entry.get("rounds_us") or []) or "-"
            step = entry.get("step_us")
            lines.append(f"| {bench['name']} | {entry['label']} | {_us(entry['median_us'])} | "
                         f"{_us2(entry.get('iqm_us'))} | {rounds} | "
                         f"{'-' if spread is None else f'{spread * 100:.1f}%'} | {entry.get('samples')} | "
                         f"{'-' if step is None else f'{step:.3g}'} | "
                         f"{_us(entry.get('e2e_p50_us'))} | {_check_text(check)} |")
    notes = _notes(doc)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _check_text(check: dict) -> str:
    if not check:
        return "-"
    max_abs = check.get("max_abs")
    return f"{'ok' if check['passed'] else 'WRONG'} (max_abs {'inf/nan' if max_abs is None else f'{max_abs:.3g}'})"


def _ceilings_line(doc: dict) -> str:
    c = doc.get("ceilings")
    device = doc.get("device") or {}
    where = device.get("gpu") or device.get("cpu") or "?"
    if not c:
        return f"Backend {doc['backend']} on {where}; ceilings not measured (no floor)."
    rates = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in c.get("matmul_TFLOPs", {}).items())
    return (f"Backend {doc['backend']} on {where}; ceilings measured in this run: copy {c['copy_GBps']:g} GB/s "
            f"(read + written), matmul {rates or '-'}.")


FLOOR_SHARE = 0.01  # a floor below this share of ours' time is noted: the pipeline is bound by launches, not traffic


def _notes(doc: dict) -> list[str]:
    """One line per distinct reason a contender has no number, benchmarks named."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for bench in doc["benchmarks"]:
        if "error" in bench:
            grouped.setdefault(("not run", "", bench["error"]), []).append(bench["name"])
            continue
        if bench.get("baseline_note"):
            grouped.setdefault(("no baselines", "", bench["baseline_note"]), []).append(bench["name"])
        ratio = bench.get("ours_over_floor")
        if ratio and ratio > 1 / FLOOR_SHARE:
            grouped.setdefault(("floor", "", f"under {FLOOR_SHARE:.0%} of ours' time: launches and calls, not bytes "
                                "or flops, bound these pipelines, so ours/floor says little"), []).append(bench["name"])
        if bench.get("failure"):
            grouped.setdefault(("FAILED", "cuvil-dsl", bench["failure"]), []).append(bench["name"])
        for entry in bench.get("contenders", {}).values():
            if entry["status"] in ("ok", "failed"):
                continue
            if entry["status"] == "wrong" and entry.get("median_us") is not None:
                grouped.setdefault(("WRONG", entry["label"], "our result differs from the reference"),
                                   []).append(bench["name"])
                continue
            grouped.setdefault((entry["status"], entry["label"], entry.get("reason", "")), []).append(bench["name"])
    return [f"- {status}{f' ({label})' if label else ''}: {reason} [{', '.join(names)}]"
            for (status, label, reason), names in grouped.items()]


# ---------------------------------------------------------------------------- plot
_COLORS = {"ours": "#d62728", "cupy": "#7f7f7f", "torch": "#1f77b4", "torch_compile": "#17becf",
           "triton": "#2ca02c", "numpy": "#bcbd22"}


CLIP = 3.0  # a panel's axis shows bars up to this many times its fastest contender; longer ones are cut


def _times_ours(r: float) -> str:
    """A time over ours: three decimals within 1% of level, so that 0.995 does not print as 1.00."""
    return f"{r:.3f}" if abs(r - 1) < 0.01 else f"{r:.2f}"


def _panel_limit(values: list[float], floor: float | None) -> float:
    """A panel's x limit: room for every bar within CLIP x the fastest contender (and the floor), so that
    the contenders near ours are told apart even when an eager baseline is 40x slower."""
    fastest = min(values)
    shown = [v for v in values if v <= CLIP * fastest] + ([floor] if floor else [])
    return 1.3 * max(shown)


def plot(doc: dict, path: str) -> None:
    """Small multiples: one panel per benchmark, each on its own linear axis from zero, ours first and
    outlined, every baseline labelled with its time over ours (above 1: ours is faster), the floor a
    dashed line; bars past ``CLIP`` times the panel's fastest contender are cut at the edge and
    labelled with their value, so a 40x slower eager baseline does not flatten the rest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = []
    for bench in doc["benchmarks"]:
        bars = [(name, e["label"], e["median_us"], e["status"]) for name, e in bench.get("contenders", {}).items()
                if e.get("median_us")]
        bars.sort(key=lambda b: ORDER.index(b[0]) if b[0] in ORDER else len(ORDER))
        if bars:
            groups.append((bench["name"], bars, (bench.get("floor") or {}).get("floor_us")))
    comparison = doc.get("comparison") or {}
    earlier = {row["name"]: row.get("then_us") for row in comparison.get("benchmarks", [])
               if comparison.get("same_device") and row.get("then_us")}  # ours in the run compared with
    device = doc.get("device") or {}
    title = f"cuvil-dsl bench, backend {doc['backend']} on {device.get('gpu') or device.get('cpu') or '?'}"
    if doc.get("date"):
        title += f", {str(doc['date'])[:10]}"
    heights = [len(bars) + 1.2 for _, bars, _ in groups] or [1.0]
    fig, axes = plt.subplots(len(heights), 1, figsize=(9, 0.9 + 0.3 * sum(heights)), squeeze=False,
                             height_ratios=heights, layout="constrained")
    used: dict[str, str] = {}
    for ax, (name, bars, floor) in zip(axes[:, 0], groups):
        ours = next((value for key, _, value, _ in bars if key == "ours"), None)
        then = earlier.get(name)
        limit = _panel_limit([value for _, _, value, _ in bars] + ([then] if then else []), floor)
        mark = then if then and then <= limit else None  # ours' earlier time, marked on ours' bar
        for y, (key, label, value, status) in enumerate(bars):
            color = _COLORS.get(key, "#9467bd")
            cut = value > limit
            ax.barh(y, min(value, limit), height=0.75, color=color, hatch="//" if cut else None,
                    edgecolor="black" if key == "ours" else ("white" if cut else color),
                    linewidth=1.2 if key == "ours" else 0)
            text = f" {_us(value)} us"
            if key != "ours" and ours:
                text += f"  ({_times_ours(value / ours)}x)"
            if status != "ok":
                text += f"  {status.upper()}"
            if cut:
                ax.text(limit * 0.995, y, text.strip(), va="center", ha="right", fontsize=7,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.9})
            else:  # past ours' earlier time's mark, when that is further out
                ax.text(max(value, mark) if key == "ours" and mark else value, y, text, va="center", fontsize=7)
            used.setdefault(key, label)
            if key == "ours" and mark:
                ax.plot([mark, mark], [y - 0.45, y + 0.45], color="black", linewidth=2.2, solid_capstyle="butt")
                used.setdefault("earlier", "")
        if floor:
            ax.axvline(floor, color="black", linestyle="--", linewidth=1.1)
            left = floor < 0.2 * limit  # near the axis: the label to the line's right
            ax.text(floor, -0.6, f" floor {_us(floor)} " if left else f"floor {_us(floor)} ",
                    ha="left" if left else "right", va="bottom", fontsize=6.5)
        ax.set_xlim(0, limit)
        ax.set_ylim(len(bars) - 0.4, -0.9)
        ax.set_yticks(range(len(bars)))
        ax.set_yticklabels([label for _, label, _, _ in bars], fontsize=7.5)
        ax.set_title(name, fontsize=8.5, loc="left", fontweight="bold")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
        ax.set_axisbelow(True)
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no timings", ha="center", va="center", transform=axes[0, 0].transAxes)
        axes[0, 0].set_axis_off()
    else:
        axes[-1, 0].set_xlabel("median time per execution (us), lower is better; (n.nnx): its time over ours, "
                               "above 1 ours is faster", fontsize=7.5)
    fig.suptitle(title, fontsize=10)
    handles = [Patch(color=_COLORS.get(k, "#9467bd"), label=lbl) for k, lbl in used.items() if k != "earlier"]
    if "earlier" in used:
        base = comparison["base"]
        handles.append(Line2D([0], [0], color="black", linewidth=2.2,
                              label=f"ours in {Path(str(base['from'])).name} ({str(base.get('date') or '?')[:10]})"))
    handles.append(Line2D([0], [0], color="black", linestyle="--", label="floor (roofline)"))
    handles.append(Patch(facecolor="#888888", edgecolor="white", hatch="//", label=f"cut at the panel's edge "
                         f"(past {CLIP:g}x its fastest)"))
    fig.legend(handles=handles, fontsize=7, loc="outside lower center", ncol=4, frameon=False)
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)
