"""Run gemm_gelu_f16's contenders once each after a warm-up, for Nsight Compute: cuBLAS's GEMM alone
(cupy.matmul), PyTorch's addmm + gelu (when PyTorch is installed) and the library's kernel; with
``attention``, attention_full_f16's instead: PyTorch's scaled_dot_product_attention and ours (with
``groups=G`` as well, ours again with G consumer warpgroups, ATTENTION_TUNING "groups"; with ``alone`` too, only
that one: its first call launches it twice, then a warm-up and the run, so ``--launch-skip 3 --launch-count 1``
picks out the run, as benchmarks/device_steps.sh's step ncusrc does).

    ncu --section LaunchStats --section SpeedOfLight --section Occupancy python3 benchmarks/ncu_gemm.py [attention]

Session 23 added it to read the launch configuration of cuBLAS's kernel (tile from its name, grid, block,
cluster, shared memory, registers) next to ours. Results are not checked here (the bench checks them). Exit
status 2 when there is no GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from raw_gpu import open_gpu  # noqa: E402


def attention_runs(rng, groups: int | None = None, alone: bool = False) -> list:
    import cupy
    import numpy as np

    import cuvil_dsl
    from cuvil_dsl.codegen import cuda_attention

    q, k, v = (cupy.asarray(rng.standard_normal((32, 2048, 64)).astype(np.float16)) for _ in range(3))
    runs = []
    try:
        import torch

        tq, tk, tv = (torch.as_tensor(x, device="cuda")[:, None] for x in (q, k, v))
        runs.append(("torch sdpa", lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, scale=0.125)))
    except ImportError:
        pass
    program = cuvil_dsl.load(str(ROOT / "benchmarks" / "attention_full_f16.cuvil"))
    ours = program.compile(backend="cuda")
    runs.append(("cuvil-dsl", lambda: ours(q, k, v)))
    if groups:  # rendered when first called, so the tuning is set around that call
        saved = dict(cuda_attention.ATTENTION_TUNING)
        cuda_attention.ATTENTION_TUNING["groups"] = groups
        try:
            tuned = program.compile(backend="cuda")
            tuned(q, k, v)
        finally:
            cuda_attention.ATTENTION_TUNING.clear()
            cuda_attention.ATTENTION_TUNING.update(saved)
        runs.append((f"cuvil-dsl, {groups} consumer warpgroups", lambda: tuned(q, k, v)))
        if alone:
            return runs[-1:]
    return runs


def gemm_runs(rng) -> list:
    import cupy
    import numpy as np

    import cuvil_dsl

    n = 4096
    a = cupy.asarray((rng.standard_normal((n, n)) * 0.05).astype(np.float16))
    b = cupy.asarray((rng.standard_normal((n, n)) * 0.05).astype(np.float16))
    bias = cupy.asarray((rng.standard_normal(n) * 0.1).astype(np.float16))
    runs = [("cupy.matmul", lambda: cupy.matmul(a, b))]
    try:
        import torch

        ta, tb, tbias = (torch.as_tensor(x, device="cuda") for x in (a, b, bias))
        runs.append(("torch addmm + gelu", lambda: torch.nn.functional.gelu(torch.addmm(tbias, ta, tb))))
    except ImportError:
        pass
    ours = cuvil_dsl.load(str(ROOT / "benchmarks" / "gemm_gelu_f16.cuvil")).compile(backend="cuda")
    runs.append(("cuvil-dsl", lambda: ours(a, b, bias)))
    return runs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if open_gpu("ncu_gemm") is None:
        return 2
    import cupy
    import numpy as np

    rng = np.random.default_rng(0)
    groups = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("groups=")), None)
    runs = attention_runs(rng, groups, "alone" in argv) if "attention" in argv else gemm_runs(rng)
    for label, fn in runs:
        fn()  # warm-up: module loads, graph capture, autotuning
        cupy.cuda.runtime.deviceSynchronize()
        print(f"-- {label}", flush=True)
        fn()
        cupy.cuda.runtime.deviceSynchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
