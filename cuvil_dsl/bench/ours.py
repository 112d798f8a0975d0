"""Our pipeline as a contender: the executor `cuvil-dsl run` uses, after its checked run.

On the GPU one sample is one execution of every device step (graphs replayed, eager kernels
launched, host statements skipped), queued on the executor's own stream: what ``run`` times, now
with an L2 flush before each sample like every baseline. The end-to-end latency goes through the
Python API instead (``cuvil_dsl.load(...).compile(...)`` called on CuPy device arrays, then a device
synchronisation): what a user calling the pipeline pays, result allocation included, as a
PyTorch call does. If that path cannot be built here (bf16 inputs, which CuPy cannot hold), the
latency is of the executor's execution plus a synchronisation, and the note says so.

On the host (cpu and reference backends) a sample is one ``executor.time(0, 1)``: the same
execution ``run`` times, synchronous, so it is its own end-to-end latency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil_dsl.bench.contender import Contender

if TYPE_CHECKING:
    from cuvil_dsl.driver import Session
    from cuvil_dsl.runtime.base import Executor


def ours(session: "Session", executor: "Executor") -> Contender:
    """The contender for ``executor``, which has performed ``run`` on the session's inputs."""
    if executor.backend != "cuda":
        return Contender("ours", f"cuvil-dsl ({executor.backend})", "host", lambda: executor.time(0, 1))
    call, close, note = _api_call(session)
    if call is None:
        def call():
            executor.execute(None)
            executor.synchronize()

    return Contender("ours", "cuvil-dsl", "gpu", lambda: executor.execute(None), stream=executor.stream,
                     call=call, close=close, note=note)


def _api_call(session: "Session"):
    """``(call, close, note)``: the Python API's callable on device inputs, warmed up; ``call`` is
    None (and ``note`` says why) when it cannot be built."""
    try:
        import cupy

        from cuvil_dsl.api import load
        from cuvil_dsl.driver import kernel_overrides

        if any(a.dtype.name == "bfloat16" for a in session.inputs.values()):
            raise TypeError("bf16 inputs cannot be CuPy arrays")
        t = session.target
        compiled = load(session.loaded.pipeline_path, entry=session.pipeline.name).compile(
            shapes=session.binding.sizes, backend="cuda", arch=t.arch, kernels=kernel_overrides(session.loaded),
            compiler=t.compiler, fallback=t.fallback, fast_math=t.fast_math, tf32=t.tf32, options=t.options,
            device=t.device)
        with cupy.cuda.Device(t.device):
            arrays = [cupy.asarray(session.inputs[p.name]) for p in session.pipeline.tensor_params]
        scalars = dict(session.binding.params)
        compiled(*arrays, **scalars)  # builds the executor, captures the graphs
        cupy.cuda.Device(t.device).synchronize()
    except Exception as exc:  # the latency falls back to the executor; the device time is unaffected
        return None, _noop, f"end-to-end through the executor (the Python API path failed: {exc})"

    def call():
        return compiled(*arrays, **scalars)

    def close():
        compiled.close()
        arrays.clear()

    return call, close, "end-to-end through the Python API on CuPy arrays"


def _noop() -> None:
    return None
