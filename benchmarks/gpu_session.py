"""Everything that needs the GPU, in one call on the lent H200: tests, examples, benchmarks.

Run from the repository root on the GPU machine (see docs/design.md, "GPU sessions"):

    python3 benchmarks/gpu_session.py --out "$OUT"

Writes ``report.md`` (the summary), ``report.json`` (every number), ``gpu-tests.log`` and
``runs.log`` under ``--out``. Steps can be skipped with ``--skip tests,specs,bench``.
Ours is timed by cuvil-dsl itself (CUDA events around each whole-pipeline execution, graph
replay, after warm-up); baselines by ``triton.testing.do_bench`` (L2 flushed before each
sample, median) when PyTorch and Triton are installed. Every number is from this run.
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


def sh(cmd: list[str], log, timeout: float) -> tuple[int, str]:
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, exc.stdout or "", (exc.stderr or "") + f"\nTIMEOUT after {timeout}s"
        out = out if isinstance(out, str) else out.decode(errors="replace")
        err = err if isinstance(err, str) else err.decode(errors="replace")
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


def run_tests(out: Path, log) -> dict:
    rc, text = sh([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests",
                   "regression", "-o", "addopts=-ra"], log, timeout=300)
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


def baselines() -> dict:
    """PyTorch eager / torch.compile times for the benchmark pipelines, and the copy ceiling."""
    try:
        import torch
        import torch.nn.functional as F
        from triton.testing import do_bench
    except Exception as exc:
        return {"error": repr(exc)}
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype=torch.float16, std=1.0):
        return torch.randn(*shape, device=dev, dtype=torch.float32, generator=g).mul_(std).to(dtype)

    x32 = rnd(1 << 26, dtype=torch.float32)
    s16, s32 = rnd(32768, 4096), rnd(32768, 4096, dtype=torch.float32)
    w, b = rnd(4096), rnd(4096, std=0.1)
    a, bb, bias = rnd(4096, 4096, std=0.05), rnd(4096, 4096, std=0.05), rnd(4096, std=0.1)
    q, k = rnd(32, 2048, 64), rnd(32, 2048, 64)
    cases = {
        "elementwise_f32": lambda: torch.relu(x32 * 1.5 + 0.25) * 2 - 0.5,
        "softmax_f16": lambda: torch.softmax(s16, -1),
        "softmax_f32": lambda: torch.softmax(s32, -1),
        "layernorm_f16": lambda: F.layer_norm(s16, (4096,), w, b, 1e-5),
        "gemm_gelu_f16": lambda: F.gelu(torch.addmm(bias, a, bb)),
        "attention_f16": lambda: torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1),
    }
    out: dict = {}
    for name, fn in cases.items():
        row = {}
        try:
            row["torch_eager_us"] = do_bench(fn, return_mode="median") * 1e3
        except Exception as exc:
            row["torch_eager_error"] = repr(exc)
        try:
            compiled = torch.compile(fn)
            compiled()
            row["torch_compile_us"] = do_bench(compiled, return_mode="median") * 1e3
        except Exception as exc:
            row["torch_compile_error"] = repr(exc)[:300]
        out[name] = row
    src = torch.empty(1 << 28, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    out["copy_ceiling_TBps"] = 2 * src.numel() * 4 / (ms * 1e-3) / 1e12
    return out


# Bytes that must move (inputs read once, outputs written once) and flops, per benchmark.
FLOORS = {
    "elementwise_f32": (2 * (1 << 26) * 4, 0),
    "softmax_f16": (2 * 32768 * 4096 * 2, 0),
    "softmax_f32": (2 * 32768 * 4096 * 4, 0),
    "layernorm_f16": (2 * 32768 * 4096 * 2, 0),
    "gemm_gelu_f16": (3 * 4096 * 4096 * 2, 2 * 4096**3),
    "attention_f16": (2 * 32 * 2048 * 64 * 2 + 32 * 2048 * 2048 * 2, 2 * 32 * 2048 * 2048 * 64),
}


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
    if "bench" in data:
        base = data.get("baselines", {})
        ceiling = base.get("copy_ceiling_TBps")
        lines += ["## Benchmarks, backend cuda", "",
                  f"Copy ceiling measured in this run: {ceiling:.2f} TB/s" if ceiling else "Copy ceiling: not measured", "",
                  "| benchmark | check | ours p50 us | floor us | torch eager us | torch.compile us | eager/ours | compile/ours |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, r in data["bench"].items():
            ours = (r.get("timing") or {}).get("p50_us")
            b = base.get(name, {})
            nbytes, flops = FLOORS.get(name, (0, 0))
            floor = nbytes / (ceiling * 1e12) * 1e6 if ceiling and nbytes else None
            eager, comp = b.get("torch_eager_us"), b.get("torch_compile_us")

            def f(v):
                return "-" if v is None else f"{v:.1f}"

            def ratio(v):
                return "-" if (v is None or not ours) else f"{v / ours:.2f}"

            lines.append(f"| {name} | {(r.get('check') or {}).get('passed')} | {f(ours)} | {f(floor)} | {f(eager)} | "
                         f"{f(comp)} | {ratio(eager)} | {ratio(comp)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    parser.add_argument("--skip", default="")
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
        if "specs" not in skip:
            data["specs"] = run_specs("specs", log)
            save()
        if "bench" not in skip:
            data["bench"] = run_specs("benchmarks", log)
            save()
            data["baselines"] = baselines()
    text = save()
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
