"""Run attention_f16's GEMM + softmax kernel once per row-band tuning, for Nsight Compute.

    ncu --section SpeedOfLight --section WarpStateStats ... python3 benchmarks/ncu_attention.py '{}' \
        '{"cluster": [1, null, 0.9, true, true, false]}'

Each argument is a ``ROW_BAND_TUNING`` as JSON (lists for tuples; ``{}`` is the default); the kernels
run in that order after one warm-up launch each, so ``--launch-skip`` / ``--launch-count`` or the
kernel's position pick them out of the report. Results are not checked here: ab_attention.py checks
every variant it times. For per-instruction counters, add ``--section SourceCounters``, export the
report's source page (``ncu --import R --page source --print-source sass --csv``) and summarise it with
benchmarks/ncu_source.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import ab_attention as ab  # noqa: E402


def main(argv: list[str]) -> int:
    import cupy

    from cuvil_dsl.runtime.device import device_arch

    tunings = [{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(a).items()} for a in argv or ["{}"]]
    loaded, pipeline, binding = ab.load(ROOT / "benchmarks" / "attention_f16.yaml")
    host = ab.fresh_inputs(binding, pipeline, seed=1)
    arch = device_arch()
    built = [ab.Built(loaded, pipeline, binding, host, True, arch, t) for t in tunings]
    for b, t in zip(built, tunings):
        b.run(only_timed=True)  # warm-up (module load, first-launch costs)
        cupy.cuda.runtime.deviceSynchronize()
        b.run(only_timed=True)
        cupy.cuda.runtime.deviceSynchronize()
        print(f"ran {t}: {b.resources}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
