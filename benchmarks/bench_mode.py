#!/usr/bin/env python3
"""``cuvil-dsl bench`` with cuda_wgmma's library switches set first, to compare a GEMM kernel variant in the
bench's own method (interleaved, rotated rounds against the same baselines) before it becomes the default:

    python3 benchmarks/bench_mode.py LIBRARY_WS=tma MULTICAST=True -- bench benchmarks/gemm_gelu_f16.yaml --quick

Each ``NAME=VALUE`` before ``--`` sets ``cuvil_dsl.codegen.cuda_wgmma.NAME`` (VALUE read as a Python literal, or
as a string when it is not one); the rest is the command line of ``cuvil-dsl``. The compile cache keys on the
generated source, so a variant never reuses the default's binaries.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    from cuvil_dsl.cli import main as cli
    from cuvil_dsl.codegen import cuda_wgmma

    if "--" not in argv:
        raise SystemExit("usage: bench_mode.py NAME=VALUE ... -- CUVIL-DSL ARGS")
    cut = argv.index("--")
    for item in argv[:cut]:
        name, _, text = item.partition("=")
        if not hasattr(cuda_wgmma, name):
            raise SystemExit(f"cuda_wgmma has no switch {name!r}")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        setattr(cuda_wgmma, name, value)
        print(f"bench_mode: cuda_wgmma.{name} = {value!r}", file=sys.stderr)
    return cli(argv[cut + 1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
