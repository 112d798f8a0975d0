"""The roofline: ceilings measured in the same run, and each benchmark's floor.

Datasheet rates are not what a kernel can reach on the machine as found, so both ceilings are
measured with the same timer as the contenders:

* **copy bandwidth**: a large device-to-device copy (1 GiB; on the host a 256 MiB ``np.copyto``),
  counting bytes read plus bytes written;
* **matrix rate**: cuBLAS through ``cupy.matmul`` on f16 4096^3 (what the tensor cores reach;
  bf16 uses the same figure, f32 and f64 products are measured on demand); on the host NumPy's
  float32 ``matmul`` 2048^3 stands for every dtype.

Each ceiling is the *fastest* sample of its measurement, not the median: a ceiling is what the
machine can reach, and noise only slows it, so the floor stays a lower bound.

The floor of a benchmark is ``max(bytes / bandwidth, flops / rate)``: the bytes that must move
(each input buffer read once, each result buffer written once, from the fusion plan's buffers at
the spec's sizes; intermediates are the fusion's business, not the problem's) and the flops of its
matrix products from the IR (``2*M*N*K`` per matmul, batch included; elementwise flops ignored, as
they hide under the memory time on every benchmark here). No implementation runs much faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.plan import FusionPlan
from cuvil_dsl.types import TensorType, concrete_shape

GPU_COPY_BYTES = 1 << 30
GPU_MATMUL_N = 4096
HOST_COPY_BYTES = 1 << 28
HOST_MATMUL_N = 2048
_HALF_RATE = {"bf16": "f16"}  # same tensor-core rate


@dataclass
class Ceilings:
    """What the machine reached in this run."""

    where: str  # "gpu" | "host"
    copy_bytes_per_s: float
    matmul_flops_per_s: dict[str, float]
    detail: dict = field(default_factory=dict)  # sizes and medians behind the numbers
    measure_rate: Callable[[str], float] | None = field(default=None, repr=False)  # for a dtype not yet measured

    def rate(self, dtype: str) -> float | None:
        """Matrix rate (flop/s) for products of ``dtype``, measured on first need where possible."""
        key = dtype if self.where == "gpu" else "f32"
        key = _HALF_RATE.get(key, key)
        if key not in self.matmul_flops_per_s and self.measure_rate is not None:
            self.matmul_flops_per_s[key] = self.measure_rate(key)
        return self.matmul_flops_per_s.get(key)

    def to_json(self) -> dict:
        return {
            "where": self.where,
            "copy_GBps": round(self.copy_bytes_per_s / 1e9, 2),
            "matmul_TFLOPs": {k: round(v / 1e12, 4) for k, v in self.matmul_flops_per_s.items()},
            **self.detail,
        }


@dataclass(frozen=True)
class Floor:
    """The least time a benchmark needs at the measured ceilings."""

    bytes: int
    flops: dict[str, int]  # by matmul operand dtype
    memory_us: float | None
    compute_us: float | None

    @property
    def floor_us(self) -> float | None:
        times = [t for t in (self.memory_us, self.compute_us) if t is not None]
        return max(times) if times else None

    @property
    def bound(self) -> str | None:
        if self.floor_us is None:
            return None
        return "compute" if (self.compute_us or 0.0) > (self.memory_us or 0.0) else "memory"

    def to_json(self) -> dict:
        def us(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {"bytes": self.bytes, "flops": sum(self.flops.values()), "memory_us": us(self.memory_us),
                "compute_us": us(self.compute_us), "floor_us": us(self.floor_us), "bound": self.bound}


def traffic_bytes(plan: FusionPlan, sizes: dict[str, int]) -> int:
    """Bytes of the plan's input and result buffers: each read or written once."""
    return sum(math.prod(concrete_shape(b.type.shape, sizes)) * b.type.dtype.itemsize
               for b in plan.buffers if b.role in ("input", "result"))


def matmul_flops(pipeline: ir.Pipeline, sizes: dict[str, int], kept: dict[str, float] | None = None) -> dict[str, int]:
    """``2*M*N*K`` summed over the pipeline's matrix products (batch dims included), by operand dtype; a product
    named in ``kept`` (by its result) counts that share of its flops (:func:`masked_share`)."""
    types = pipeline.value_types()
    flops: dict[str, int] = {}
    for op in pipeline.ops():
        if op.op != "matmul" or not isinstance(op.type, TensorType):
            continue
        lhs = types[op.args[0]]
        assert isinstance(lhs, TensorType)
        k = concrete_shape(lhs.shape, sizes)[-1]
        out = math.prod(concrete_shape(op.type.shape, sizes))
        key = lhs.dtype.value
        flops[key] = flops.get(key, 0) + round(2 * out * k * (kept or {}).get(op.out, 1.0))
    return flops


def masked_share(pipeline: ir.Pipeline, inputs: dict[str, np.ndarray], params: dict,
                 sizes: dict[str, int]) -> dict[str, float]:
    """For a masked softmax, ``softmax(where(c, x, fill))`` with the mask ``c`` computed from the inputs alone (no
    product) and a constant fill: the products whose work the mask leaves out, each with the share of it that is
    needed. Those are the products ``x`` is computed from and the one that multiplies the softmax (attention's
    ``P V``); the share is the logits the mask keeps, a row it masks whole counting whole (its softmax is uniform
    over the fill). A floor that counted the masked logits' work would be no floor for a kernel that skips it.
    Empty for any other pipeline."""
    from cuvil_dsl.reference.executor import evaluate

    ops = {op.out: op for op in pipeline.ops()}
    share: dict[str, float] = {}
    for soft in ops.values():
        where = ops.get(soft.args[0]) if soft.op == "softmax" else None
        if where is None or where.op != "where" or not isinstance(where.type, TensorType):
            continue
        mask, fill = ir.ancestors(ops, where.args[0]), ir.ancestors(ops, where.args[2])
        if any(ops[v].op == "matmul" for v in mask | fill if v in ops) or any(v not in ops for v in fill):
            continue  # the mask computed from a product, or the fill read from memory
        c = np.broadcast_to(np.asarray(evaluate(pipeline, where.args[0], inputs, params), dtype=bool),
                            concrete_shape(where.type.shape, sizes))
        axis = soft.attr("axis", c.ndim - 1)
        per_row, n = np.count_nonzero(c, axis=axis), c.shape[axis]
        needed = float(np.where(per_row == 0, n, per_row).sum()) / max(1, per_row.size * n)
        for v in ir.ancestors(ops, where.args[1]):
            if v in ops and ops[v].op == "matmul":
                share[v] = needed
        for op in ops.values():
            if op.op == "matmul" and op.args[0] == soft.out:
                share[op.out] = needed
    return share


def floor_for(plan: FusionPlan, pipeline: ir.Pipeline, sizes: dict[str, int], ceilings: Ceilings | None,
              kept: dict[str, float] | None = None) -> Floor:
    """The floor at ``ceilings`` (bytes and flops alone without them); ``kept``: :func:`masked_share`."""
    nbytes = traffic_bytes(plan, sizes)
    flops = matmul_flops(pipeline, sizes, kept)
    if ceilings is None:
        return Floor(nbytes, flops, None, None)
    memory_us = nbytes / ceilings.copy_bytes_per_s * 1e6 if ceilings.copy_bytes_per_s > 0 else None
    compute_us = None
    for dtype, count in flops.items():
        rate = ceilings.rate(dtype)
        if rate:
            compute_us = (compute_us or 0.0) + count / rate * 1e6
    return Floor(nbytes, flops, memory_us, compute_us)


# ---------------------------------------------------------------------------- measuring
def measure_gpu(timer, device: int = 0, copy_bytes: int = GPU_COPY_BYTES, n: int = GPU_MATMUL_N) -> Ceilings:
    """Copy bandwidth and the f16 cuBLAS rate on GPU ``device``, timed by ``timer`` (a GpuTimer)."""
    import cupy

    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        src = cupy.empty(copy_bytes, dtype=cupy.uint8)
        dst = cupy.empty_like(src)
        cupy.cuda.runtime.memsetAsync(src.data.ptr, 0x5A, copy_bytes, stream.ptr)  # not zeros, not timed

        def copy():
            cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, copy_bytes,
                                          cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)

        copy()
        copied = timer.measure(copy, stream)
        detail = {"copy_bytes": copy_bytes, "copy_us": round(_best(copied), 3), "matmul_n": n}

        def matmul_rate(dtype: str) -> float:
            np_dtype = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]
            rng = cupy.random.default_rng(0)
            a = rng.standard_normal((n, n), dtype=np.float32).astype(np_dtype)
            b = rng.standard_normal((n, n), dtype=np.float32).astype(np_dtype)
            c = cupy.empty((n, n), dtype=np_dtype)

            def product():
                with stream:
                    cupy.matmul(a, b, out=c)

            product()
            stream.synchronize()
            timed = timer.measure(product, stream)
            detail[f"matmul_{dtype}_us"] = round(_best(timed), 3)
            return 2 * n**3 / (_best(timed) * 1e-6)

        ceilings = Ceilings("gpu", 2 * copy_bytes / (_best(copied) * 1e-6), {}, detail, matmul_rate)
        ceilings.rate("f16")
        cupy.get_default_memory_pool().free_all_blocks()
        return ceilings


def measure_host(timer, copy_bytes: int = HOST_COPY_BYTES, n: int = HOST_MATMUL_N) -> Ceilings:
    """``np.copyto`` bandwidth and NumPy's float32 matmul rate, timed by ``timer`` (a HostTimer)."""
    src = np.full(copy_bytes // 4, 1.25, dtype=np.float32)
    dst = np.empty_like(src)
    copied = timer.measure(lambda: np.copyto(dst, src))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    product = timer.measure(lambda: np.matmul(a, b, out=c))
    detail = {"copy_bytes": src.nbytes, "copy_us": round(_best(copied), 3), "matmul_n": n,
              "matmul_f32_us": round(_best(product), 3)}
    return Ceilings("host", 2 * src.nbytes / (_best(copied) * 1e-6), {"f32": 2 * n**3 / (_best(product) * 1e-6)},
                    detail)


def _best(measurement) -> float:
    """The fastest sample, in microseconds (see the module docstring)."""
    return float(min(measurement.samples_us))
