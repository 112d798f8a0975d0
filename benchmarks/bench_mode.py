#!/usr/bin/env python3
"""``cuvil-dsl bench`` with code-generation switches set first, to compare a kernel variant in the bench's own
method (interleaved, rotated rounds against the same baselines) before it becomes the default:

    python3 benchmarks/bench_mode.py LIBRARY_WS=tma MULTICAST=True -- bench benchmarks/gemm_gelu_f16.yaml --quick
    python3 benchmarks/bench_mode.py cuda_rows.WARP_ROWS=2 cuda_rows.RAW_CACHE=True -- bench SPEC --quick

Each ``[MODULE.]NAME=VALUE`` before ``--`` sets ``cuvil_dsl.codegen.MODULE.NAME`` (MODULE defaults to
``cuda_wgmma``; VALUE read as a Python literal, or as a string when it is not one); the rest is the command line
of ``cuvil-dsl``, or a script and its arguments (a first word ending in ``.py``: run as ``__main__`` in this
process, so the switches hold for it too):

    python3 benchmarks/bench_mode.py cuda_attention.SKIP=True -- benchmarks/ab_attention_full.py --only default

or ``-m MODULE`` and its arguments (run as ``python -m`` would, in this process), e.g. the GPU tests under a
switch:

    python3 benchmarks/bench_mode.py cuda_attention.SKIP=True -- -m pytest -m gpu tests/gpu/test_codegen_gpu.py

The switches hold in Python child processes too (``regression/update_code.py`` replays each case in one):
they travel in ``$CUVIL_BENCH_SWITCHES``, applied at each child's start by ``benchmarks/switch_site/
sitecustomize.py`` (put first on ``PYTHONPATH``). The compile cache keys on the generated source, so a variant
never reuses the default's binaries.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


ENV = "CUVIL_BENCH_SWITCHES"  # the switches, one per line, for the child processes (see switch_site/)
SITE = Path(__file__).resolve().parent / "switch_site"


def apply(items: list[str], quiet: bool = False) -> None:
    """Set each ``[MODULE.]NAME=VALUE`` of ``items`` (see the module's docstring)."""
    import importlib

    for item in items:
        target, _, text = item.partition("=")
        module_name, _, name = target.rpartition(".")
        module = importlib.import_module(f"cuvil_dsl.codegen.{module_name or 'cuda_wgmma'}")
        if not hasattr(module, name):
            raise SystemExit(f"{module.__name__} has no switch {name!r}")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        setattr(module, name, value)
        if not quiet:
            print(f"bench_mode: {module.__name__}.{name} = {value!r}", file=sys.stderr)


def main(argv: list[str]) -> int:
    import os

    from cuvil_dsl.cli import main as cli

    if "--" not in argv:
        raise SystemExit("usage: bench_mode.py NAME=VALUE ... -- CUVIL-DSL ARGS")
    cut = argv.index("--")
    apply(argv[:cut])
    # the same switches in every Python child process (regression/update_code.py replays each case in one):
    # switch_site/sitecustomize.py applies them at its start
    os.environ[ENV] = "\n".join(argv[:cut])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SITE), str(SITE.parents[1]), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    rest = argv[cut + 1:]
    if rest and (rest[0].endswith(".py") or rest[0] == "-m"):
        import runpy

        module = rest[1] if rest[0] == "-m" and len(rest) > 1 else None
        if rest[0] == "-m" and module is None:
            raise SystemExit("bench_mode.py: -m needs a module name")
        sys.argv = rest[1:] if module else rest
        try:
            if module:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(rest[0], run_name="__main__")
        except SystemExit as done:
            return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        return 0
    return cli(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
