"""Applies ``benchmarks/bench_mode.py``'s code-generation switches in a child process of it.

bench_mode puts this folder first on ``PYTHONPATH`` and the switches in ``$CUVIL_BENCH_SWITCHES`` (one
``[MODULE.]NAME=VALUE`` a line), so Python runs this at every child's start. Without that variable it does
nothing. Benchmarks only: the package never reads it.
"""

import os

if os.environ.get("CUVIL_BENCH_SWITCHES"):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        from bench_mode import apply
    finally:
        del sys.path[0]
    apply(os.environ["CUVIL_BENCH_SWITCHES"].splitlines(), quiet=True)
