"""Everything that needs the GPU, in one call on the lent H200: tests, examples, benchmarks.

Run from the repository root on the GPU machine (see docs/design.md, "GPU sessions"):

    python3 benchmarks/gpu_session.py --out "$OUT"

Writes ``report.md`` (the summary), ``report.json`` (every number), ``bench.json`` and
``bench.png`` (the benchmarks), ``gpu-tests.log`` and ``runs.log`` under ``--out``. Steps, in
order: ``tests``, ``record`` (a cuda regression case per example spec under ``--out``/cuda,
replayed at once), ``extras`` (the ``benchmarks/<name>.py`` scripts named by ``--extras``), ``specs``, ``bench`` (``cuvil-dsl bench benchmarks/*.yaml --json --plot``: ours
side by side with CuPy, PyTorch eager, torch.compile and Triton, and the roofline, all timed by
one method, see docs/cli.md#bench), ``shapes`` (only with ``--shapes``: the same over
``benchmarks/shapes/``, the benchmarks' pipelines at other sizes, into ``shapes.json`` and ``shapes.png``),
``budgets`` (``cuvil-dsl run`` on each benchmark: its check and budget verdict); any can be skipped
with ``--skip``, e.g. ``--skip tests,specs``.
Every number is from this run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python3 benchmarks/gpu_session.py`: the report imports cuvil_dsl.bench
    sys.path.insert(0, str(ROOT))


def sh(cmd: list[str], log, timeout: float) -> tuple[int, str]:
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        def text(data) -> str:  # TimeoutExpired carries bytes even when text=True was asked for
            return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")

        rc, out, err = 124, text(exc.stdout), text(exc.stderr) + f"\nTIMEOUT after {timeout}s"
    log.write(f"$ {' '.join(cmd)}  (rc={rc}, {time.perf_counter() - started:.1f}s)\n{err}\n")
    log.flush()
    return rc, out


def device_info() -> dict:
    info = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "python": platform.python_version()}
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        info.update(
            gpu=props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
            driver=cupy.cuda.runtime.driverGetVersion(),
            runtime=cupy.cuda.runtime.runtimeGetVersion(),
            cupy=cupy.__version__,
        )
    except Exception as exc:  # report what is missing rather than stopping the session
        info["gpu_error"] = repr(exc)
    for mod in ("numpy", "numba", "torch", "triton"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:
            info[mod] = None
    try:
        from cuvil_dsl.compile import nvrtc

        info["nvrtc"] = nvrtc.version()
    except Exception as exc:
        info["nvrtc"] = repr(exc)
    return info


def plugin_option() -> list[str]:
    """``-p cuvil_dsl.testing.plugin`` unless the installed package registers it (entry point)."""
    from importlib.metadata import entry_points

    if any(e.value == "cuvil_dsl.testing.plugin" for e in entry_points(group="pytest11")):
        return []
    return ["-p", "cuvil_dsl.testing.plugin"]


def run_tests(out: Path, log) -> dict:
    rc, text = sh([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *plugin_option(), "tests",
                   "regression", "-o", "addopts=-rA"], log, timeout=300)
    (out / "gpu-tests.log").write_text(text)
    tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["(no output)"]
    return {"rc": rc, "summary": tail[0]}


def run_specs(folder: str, log, iterations: int | None = None) -> dict:
    results = {}
    for spec in sorted((ROOT / folder).glob("*.yaml")):
        cmd = [sys.executable, "-m", "cuvil_dsl", "run", str(spec.relative_to(ROOT)), "--backend", "cuda", "--json"]
        if iterations:
            cmd += ["--iterations", str(iterations)]
        rc, text = sh(cmd, log, timeout=240)
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = {"raw": text[-2000:]}
        results[spec.stem] = {"rc": rc, **data}
    return results


def run_bench(out: Path, log, quick: bool, timeout: float, baselines: str = "auto", folder: str = "benchmarks",
              name: str = "bench", rounds: int | None = None, compare: str | None = None) -> dict:
    """``cuvil-dsl bench`` over every spec of ``folder``: its JSON document (``NAME.json``) and plot (``NAME.png``);
    ``compare``: a saved run (``benchmarks/results/...-bench.json``) to compare ours with (``--compare``)."""
    specs = [str(p.relative_to(ROOT)) for p in sorted((ROOT / folder).glob("*.yaml"))]
    cmd = [sys.executable, "-m", "cuvil_dsl", "bench", *specs, "--backend", "cuda", "--json",
           "--plot", str(out / f"{name}.png"), "--baselines", baselines, *(["--quick"] if quick else []),
           *(["--rounds", str(rounds)] if rounds else []), *(["--compare", compare] if compare else [])]
    rc, text = sh(cmd, log, timeout=timeout)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = {"raw": text[-2000:]}
    (out / f"{name}.json").write_text(json.dumps(doc, indent=2))
    return {"rc": rc, **doc}


def run_record(out: Path, log) -> dict:
    """Record a cuda regression case per example spec under ``out/regression/cuda`` (to be copied into
    regression/cuda), then replay them all here with the pytest plugin."""
    dest = out / "regression" / "cuda"  # the plugin collects cases under a folder named regression
    rc, text = sh([sys.executable, "regression/record_all.py", "--backend", "cuda", "--dest", str(dest)], log,
                  timeout=300)
    (out / "record.log").write_text(text)
    # The rootdir is `out`, so the cases sit under a folder named regression below it (the plugin
    # collects only those). The plugin is named explicitly: on the GPU machine the package is on PYTHONPATH, not installed,
    # so its pytest11 entry point is not registered.
    replay_rc, replay = sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_option(),
                            "--rootdir", str(out), str(dest), "-o", "addopts=-ra"], log, timeout=300)
    (out / "replay.log").write_text(replay)
    tail = [ln for ln in replay.splitlines() if ln.strip()][-1:] or ["(no output)"]
    cases = sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []
    if dest.is_dir():  # one archive: the device tool brings back a limited number of files
        import shutil
        import tarfile

        with tarfile.open(out / "regression-cuda.tar.gz", "w:gz") as tar:
            tar.add(dest, arcname="cuda")
        shutil.rmtree(out / "regression")
    return {"rc": rc, "cases": cases, "replay_rc": replay_rc, "replay": tail[0]}


def run_extras(out: Path, log, names: list[str], timeout: float) -> dict:
    """Each ``benchmarks/<name>.py`` script (A/B comparisons, overhead measurements), one by one;
    each writes its own markdown table under ``out``."""
    results = {}
    env_out = {**os.environ, "OUT": str(out)}
    for name in names:
        script = ROOT / "benchmarks" / f"{name}.py"
        started = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                                  timeout=timeout, env=env_out)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            text = (exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or "")
        (out / f"{name}.log").write_text(text)
        log.write(f"$ {script.name} (rc={rc}, {time.perf_counter() - started:.1f}s)\n")
        results[name] = {"rc": rc, "tail": text[-3000:]}
    return results


def report(data: dict) -> str:
    info = data["device"]
    lines = [f"# GPU session {info.get('date')}", "",
             f"Device: {info.get('gpu')}, driver {info.get('driver')}, NVRTC {info.get('nvrtc')}, CuPy {info.get('cupy')}, "
             f"torch {info.get('torch')}, triton {info.get('triton')}, numba {info.get('numba')}", ""]
    if "tests" in data:
        lines += [f"GPU tests: rc={data['tests']['rc']}: {data['tests']['summary']}", ""]
    if "specs" in data:
        lines += ["## Examples (specs/), backend cuda", "", "| spec | rc | check | p50 us | budget |", "|---|---|---|---|---|"]
        for name, r in data["specs"].items():
            t = (r.get("timing") or {}).get("p50_us")
            lines.append(f"| {name} | {r['rc']} | {(r.get('check') or {}).get('passed')} | "
                         f"{'-' if t is None else f'{t:.1f}'} | {(r.get('budget') or {}).get('passed')} |")
        lines.append("")
    for key, title in (("bench", "Benchmarks"), ("shapes", "The benchmarks' pipelines at other shapes (benchmarks/shapes/)")):
        if key not in data:
            continue
        bench = data[key]
        lines += [f"## {title}, backend cuda (`cuvil-dsl bench`, plot in {key}.png)", "", f"rc={bench.get('rc')}", ""]
        if "benchmarks" in bench:
            from cuvil_dsl.bench.report import format_table
            from cuvil_dsl.bench.saved import format_comparison

            lines.append(format_table(bench))
            if bench.get("comparison"):
                lines.append(format_comparison(bench["comparison"]))
        else:
            lines += ["```", str(bench.get("raw") or bench.get("error"))[-2000:], "```", ""]
    if "record" in data:
        r = data["record"]
        lines += ["## cuda regression cases", "", f"recorded rc={r['rc']}: {len(r['cases'])} cases; "
                  f"replayed rc={r['replay_rc']}: {r['replay']}", ""]
    for name, r in data.get("extras", {}).items():
        lines += [f"## {name} (rc={r['rc']})", "", "```", r["tail"], "```", ""]
    if "budgets" in data:
        lines += ["## Budgets (`cuvil-dsl run` on benchmarks/)", "", "| benchmark | rc | check | p50 us | budget |",
                  "|---|---|---|---|---|"]
        for name, r in data["budgets"].items():
            t = (r.get("timing") or {}).get("p50_us")
            lines.append(f"| {name} | {r['rc']} | {(r.get('check') or {}).get('passed')} | "
                         f"{'-' if t is None else f'{t:.1f}'} | {(r.get('budget') or {}).get('passed')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    parser.add_argument("--skip", default="",
                        help="comma list of steps to skip: tests,record,extras,specs,bench,budgets")
    parser.add_argument("--extras", default="api_overhead",
                        help="comma list of benchmarks/<name>.py scripts for the extras step")
    parser.add_argument("--extras-timeout", type=float, default=150.0, help="seconds for each extras script")
    parser.add_argument("--quick", action="store_true", help="bench with --quick (a fifth of the timing budget)")
    parser.add_argument("--bench-timeout", type=float, default=540.0, help="seconds for the bench step")
    parser.add_argument("--baselines", default="auto", help="passed to `cuvil-dsl bench --baselines`")
    parser.add_argument("--compare", metavar="BASE.json",
                        help="compare the bench step's ours with a saved run (e.g. the last session's "
                             "benchmarks/results/...-bench.json on the same GPU): `cuvil-dsl bench --compare`")
    parser.add_argument("--shapes", action="store_true",
                        help="also bench benchmarks/shapes/*.yaml (the pipelines at other shapes; --quick, 2 rounds; "
                             "about 5 minutes) after the bench step")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    data: dict = {"device": device_info()}

    def save() -> str:
        # After every step, so a session cut short still brings back what it measured.
        (out / "report.json").write_text(json.dumps(data, indent=2, default=str))
        text = report(data)
        (out / "report.md").write_text(text)
        return text

    with open(out / "runs.log", "w") as log:
        if "tests" not in skip:
            data["tests"] = run_tests(out, log)
            save()
        if "record" not in skip:
            data["record"] = run_record(out, log)
            save()
        if "extras" not in skip:
            data["extras"] = run_extras(out, log, list(filter(None, args.extras.split(","))), args.extras_timeout)
            save()
        if "specs" not in skip:
            data["specs"] = run_specs("specs", log)
            save()
        if "bench" not in skip:
            data["bench"] = run_bench(out, log, args.quick, args.bench_timeout, args.baselines, compare=args.compare)
            save()
        if args.shapes:
            data["shapes"] = run_bench(out, log, True, args.bench_timeout, args.baselines, "benchmarks/shapes", "shapes", 2)
            save()
        if "budgets" not in skip:
            data["budgets"] = run_specs("benchmarks", log)
    text = save()
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
