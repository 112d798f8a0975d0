"""Saved bench documents: loading them, merging several runs, comparing a run with an earlier one.

``cuvil-dsl bench --json`` prints one document (:mod:`cuvil_dsl.bench.report`). A saved one can be
read back (``--from``), several merged into one report (one spec a run, as a GPU session with a time
limit runs them), and a run compared with an earlier one (``--compare``): ours then and now, and
ours against the same baseline then and now, which is the comparison that survives a machine's
drift between the two runs (both contenders drift alike; see docs/cli.md, bench).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["SavedError", "load", "merge", "compare", "format_comparison"]


class SavedError(ValueError):
    """A saved document that cannot be used: the message names the file and what is wrong."""


def load(path: str | Path) -> dict:
    """The bench document saved in ``path`` (``cuvil-dsl bench --json > path``), checked for the
    keys the table, the plot and the comparison read."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SavedError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SavedError(f"{path}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); save a run with "
                         "`cuvil-dsl bench SPEC... --json > FILE.json`") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise SavedError(f"{path}: not a `cuvil-dsl bench --json` document (no list of benchmarks)")
    if "error" in doc and not doc["benchmarks"]:
        raise SavedError(f"{path}: a run that benchmarked nothing: {doc['error']}")
    for i, bench in enumerate(doc["benchmarks"]):
        if not isinstance(bench, dict) or not isinstance(bench.get("name"), str):
            raise SavedError(f"{path}: benchmark {i} has no name")
        if "error" not in bench and not isinstance(bench.get("contenders"), dict):
            raise SavedError(f"{path}: benchmark {bench['name']!r} has no contenders")
    for key in ("backend", "device"):
        if key not in doc:
            raise SavedError(f"{path}: not a `cuvil-dsl bench --json` document (no {key!r})")
    doc.setdefault("ceilings", None)
    doc.setdefault("exit_code", 0)
    return doc


def _where(doc: dict) -> str:
    device = doc.get("device") or {}
    return str(device.get("gpu") or device.get("cpu") or "?")


def merge(docs: list[dict], names: list[str] | None = None) -> dict:
    """One document from several runs, in order: a benchmark that more than one run has is taken
    from the last (a spec run again after a fix replaces its earlier result). The runs must share a
    backend and a device, since one table and one plot compare their times; each benchmark keeps
    the floor of its own run, and ``runs`` lists every run's date and ceilings."""
    if not docs:
        raise SavedError("nothing to merge")
    names = names or [f"run {i + 1}" for i in range(len(docs))]
    first = docs[0]
    for doc, name in zip(docs[1:], names[1:]):
        if doc["backend"] != first["backend"] or _where(doc) != _where(first):
            raise SavedError(f"{name}: backend {doc['backend']} on {_where(doc)}, but {names[0]} is backend "
                             f"{first['backend']} on {_where(first)}: one report compares times of one device")
    if len(docs) == 1:
        return first
    by_name: dict[str, dict] = {}
    for doc in docs:
        for bench in doc["benchmarks"]:
            by_name.pop(bench["name"], None)  # the last run's, in the last run's place
            by_name[bench["name"]] = bench
    last = max(docs, key=lambda d: str(d.get("date") or ""))
    merged = {key: value for key, value in first.items() if key not in ("benchmarks", "runs")}
    merged.update(date=last.get("date"), versions=last.get("versions", first.get("versions")),
                  benchmarks=list(by_name.values()),
                  exit_code=max(int(d.get("exit_code") or 0) for d in docs),
                  runs=[{"from": name, "date": d.get("date"), "ceilings": d.get("ceilings"),
                         "benchmarks": [b["name"] for b in d["benchmarks"]]} for d, name in zip(docs, names)])
    ceilings = [d.get("ceilings") for d in docs if d.get("ceilings")]
    merged["ceilings"] = ceilings[-1] if ceilings else None
    return merged


def _median(bench: dict, name: str) -> float | None:
    entry = bench.get("contenders", {}).get(name) or {}
    value = entry.get("median_us")
    return float(value) if entry.get("status") == "ok" and value else None


def _rel_iqr(now: dict, then: dict, name: str) -> float:
    """A contender's interquartile range over its median, the mean of two runs: what a change must pass."""
    parts = []
    for bench in (now, then):
        entry = bench.get("contenders", {}).get(name) or {}
        median = entry.get("median_us")
        parts.append(float(entry.get("iqr_us") or 0.0) / median if median else 0.0)
    return sum(parts) / 2


def compare(doc: dict, base: dict, fail_slower_pct: float | None = None, base_name: str = "base") -> dict:
    """Each benchmark of ``doc`` against the one of the same name in ``base``.

    Per benchmark: ours then and now and ``speedup`` (then over now: above 1, faster now); the
    baseline both runs timed that is fastest now, its times, and ``against_baseline``: ours' time
    over that baseline's now, divided by the same then (below 1: ours gained on it). On one device
    ``verdict`` judges ours' time: ``level`` within the runs' interquartile ranges (relative to their
    medians; such a change never fails), else ``faster`` or ``slower``, or ``SLOWER`` (listed in
    ``failed``) past ``fail_slower_pct`` percent when that is given. On different devices the times
    are not compared; the verdict then reads ``against_baseline`` the same way, its noise both
    contenders' ranges."""
    same_device = doc["backend"] == base["backend"] and _where(doc) == _where(base)
    then_by_name = {b["name"]: b for b in base["benchmarks"] if "error" not in b}
    rows, failed = [], []
    for bench in doc["benchmarks"]:
        name = bench["name"]
        old = then_by_name.get(name)
        if "error" in bench:
            rows.append({"name": name, "verdict": "not run"})
            continue
        if old is None:
            rows.append({"name": name, "verdict": "new"})
            continue
        now, then = _median(bench, "ours"), _median(old, "ours")
        row: dict = {"name": name, "then_us": then, "now_us": now,
                     "speedup": round(then / now, 4) if then and now else None}
        common = [key for key in bench.get("contenders", {}) if key != "ours"
                  and _median(bench, key) and _median(old, key)]
        if common:
            key = min(common, key=lambda k: _median(bench, k))
            row.update(baseline=key, baseline_label=bench["contenders"][key].get("label", key),
                       baseline_then_us=_median(old, key), baseline_now_us=_median(bench, key))
            if then and now:
                ratio_now, ratio_then = now / row["baseline_now_us"], then / row["baseline_then_us"]
                row["against_baseline"] = round(ratio_now / ratio_then, 4)
        # the change judged, in percent (above 0: slower), and the noise it must pass: the runs' interquartile
        # ranges over their medians (on different devices, ours against the baseline: both contenders' ranges)
        noise = _rel_iqr(bench, old, "ours")
        if same_device:
            change = (now / then - 1) * 100 if then and now else None
        else:
            rel = row.get("against_baseline")
            change = (rel - 1) * 100 if rel else None
            noise += _rel_iqr(bench, old, row["baseline"]) if rel else 0.0
        ours_status = (bench.get("contenders", {}).get("ours") or {}).get("status", "ok")
        if ours_status != "ok":  # our result wrong or failed now: the run's exit status says so already
            row["verdict"] = ours_status.upper()
        elif change is None:
            row["verdict"] = "not timed" if now is None or then is None else "not judged"
        elif abs(change) <= noise * 100:
            row["verdict"] = "level"
        elif fail_slower_pct is not None and change > fail_slower_pct:
            row["verdict"] = "SLOWER"
            failed.append(name)
        else:
            row["verdict"] = "faster" if change < 0 else "slower"
        row["change_pct"] = None if change is None else round(change, 2)
        rows.append(row)
    names_now = {b["name"] for b in doc["benchmarks"]}
    return {
        "base": {"from": base_name, "date": base.get("date"), "backend": base["backend"], "device": _where(base)},
        "same_device": same_device,
        "judged_by": "time" if same_device else "against_baseline",
        "fail_slower_pct": fail_slower_pct,
        "benchmarks": rows,
        "missing": [b["name"] for b in base["benchmarks"] if b["name"] not in names_now],
        "failed": failed,
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_comparison(comparison: dict) -> str:
    """The comparison as Markdown: a line on the two runs, then one row per benchmark."""
    base = comparison["base"]
    lines = ["", f"Compared with {base['from']} ({str(base.get('date') or '?')[:19]}, backend {base['backend']} on "
                 f"{base['device']})."]
    if not comparison["same_device"]:
        lines.append("The runs are on different devices: their times do not compare; each verdict reads ours against "
                     "the same baseline in both runs (which other hardware can move too).")
    if comparison["fail_slower_pct"] is not None:
        lines.append(f"A benchmark fails past {comparison['fail_slower_pct']:g}% slower.")
    lines += ["", "| benchmark | ours then us | ours now us | then/now | baseline | its then us | its now us "
                  "| ours/baseline, now over then | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for row in comparison["benchmarks"]:
        speedup = row.get("speedup")
        against = row.get("against_baseline")
        lines.append(f"| {row['name']} | {_fmt(row.get('then_us'))} | {_fmt(row.get('now_us'))} | "
                     f"{_fmt(speedup, 3)} | {row.get('baseline_label', '-')} | {_fmt(row.get('baseline_then_us'))} | "
                     f"{_fmt(row.get('baseline_now_us'))} | {_fmt(against, 3)} | {row['verdict']} |")
    if comparison["missing"]:
        lines.append(f"\nIn {base['from']} only: {', '.join(comparison['missing'])}.")
    return "\n".join(lines) + "\n"
