"""What the timers and the checks need from anything that is benchmarked: ours or a baseline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


def _nothing() -> None:
    return None


@dataclass
class Contender:
    """One implementation of a benchmark, ready to run on its inputs.

    ``launch`` queues one execution and returns its output (on the GPU it must queue on
    ``stream``, the stream its events and L2 flushes go to); ``fetch`` turns that output into a
    host array (waiting for it); ``call`` is what a user would call, timed end to end (default:
    ``launch``); ``close`` frees what it holds.
    """

    name: str  # "ours", or a baseline family: "cupy", "torch", "torch_compile", "triton", "numpy"
    label: str  # for tables and plots
    device: str  # "gpu" (timed with CUDA events) | "host" (timed with perf_counter)
    launch: Callable[[], object]
    fetch: Callable[[object], np.ndarray] = np.asarray
    stream: object | None = None
    call: Callable[[], object] | None = None
    close: Callable[[], None] = field(default=_nothing)
    note: str = ""  # how it was built, when worth saying (e.g. the end-to-end path used)
