"""Arrays from and to the caller's library: NumPy, CuPy and PyTorch, without host round trips.

A caller's array is normalised once per new array object: host data to a NumPy array, device
data to a CuPy array over the same memory (PyTorch through DLPack, anything else through
``__cuda_array_interface__``). bf16 device data is carried as uint16 bit patterns, because CuPy
has no bfloat16; bf16 host data as ``ml_dtypes.bfloat16``. Results go back as the caller's kind:
NumPy in, NumPy out; CuPy in, CuPy out; PyTorch in, PyTorch out (on the same device kind).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

HOST_KINDS = ("numpy", "torch-cpu")


@dataclass(frozen=True)
class Normalized:
    """A caller's array as the runtime uses it.

    ``array`` is a NumPy array (host kinds) or a CuPy array (device kinds); ``dtype`` is the
    logical element type for checks and messages (``ml_dtypes.bfloat16`` for bf16 data even where
    ``array`` holds uint16 bits).
    """

    kind: str  # numpy | torch-cpu | cupy | torch-cuda | cuda-array (any other __cuda_array_interface__)
    array: object
    dtype: np.dtype

    @property
    def on_device(self) -> bool:
        return self.kind not in HOST_KINDS


def kind_of(obj: object) -> str:
    """``numpy``, ``torch-cpu``, ``cupy``, ``torch-cuda``, ``cuda-array``, or ``other`` (lists, scalars:
    converted with ``numpy.asarray`` on every call, since their contents cannot be watched)."""
    module = type(obj).__module__.split(".")[0]
    if isinstance(obj, np.ndarray):
        return "numpy"
    if module == "cupy":
        return "cupy"
    if module == "torch":
        return "torch-cuda" if obj.is_cuda else "torch-cpu"
    if hasattr(obj, "__cuda_array_interface__"):
        return "cuda-array"
    return "other"


def normalize(obj: object) -> Normalized:
    kind = kind_of(obj)
    if kind in ("numpy", "other"):
        array = np.asarray(obj)
        return Normalized("numpy", array, array.dtype)
    if kind == "cupy":
        return Normalized(kind, obj, obj.dtype)
    if kind == "cuda-array":
        import cupy

        array = cupy.asarray(obj)
        return Normalized(kind, array, array.dtype)
    return _from_torch(obj, kind)


def _from_torch(tensor, kind: str) -> Normalized:
    import torch

    tensor = tensor.detach()
    bf16 = tensor.dtype == torch.bfloat16
    if bf16:
        tensor = tensor.view(torch.int16)
    if kind == "torch-cpu":
        array = tensor.numpy()
        return Normalized(kind, array.view(ml_dtypes.bfloat16) if bf16 else array,
                          np.dtype(ml_dtypes.bfloat16) if bf16 else array.dtype)
    import cupy

    array = cupy.from_dlpack(tensor)
    if bf16:
        array = array.view(cupy.uint16)
    return Normalized(kind, array, np.dtype(ml_dtypes.bfloat16) if bf16 else array.dtype)


def to_host(item: Normalized) -> np.ndarray:
    """The data as a NumPy array (a device array is copied to the host: only for host backends)."""
    if item.on_device:
        host = item.array.get()
        return host.view(ml_dtypes.bfloat16) if item.dtype == ml_dtypes.bfloat16 else host
    return item.array


_TORCH_STREAMS: dict[int, object] = {}  # CuPy wrappers of PyTorch streams, by handle


def caller_stream(kind: str):
    """The stream the caller's library queues its work on now (device kinds only)."""
    import cupy

    if kind != "torch-cuda":
        return cupy.cuda.get_current_stream()
    import torch

    current = torch.cuda.current_stream()
    wrapped = _TORCH_STREAMS.get(current.cuda_stream)
    if wrapped is None:
        wrapped = _TORCH_STREAMS[current.cuda_stream] = cupy.cuda.Stream.from_external(current)
    return wrapped


def from_host(array: np.ndarray, kind: str):
    """A host result as the caller's kind (device kinds when a host backend ran the pipeline)."""
    if kind.startswith("torch"):
        import torch

        if array.dtype == ml_dtypes.bfloat16:
            tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array)
        return tensor.cuda() if kind == "torch-cuda" else tensor
    if kind == "numpy":
        return array
    import cupy

    return cupy.asarray(array.view(np.uint16) if array.dtype == ml_dtypes.bfloat16 else array)


def from_device(array, kind: str, bf16: bool):
    """A device result (CuPy, bf16 as uint16 bits) as the caller's kind."""
    if kind == "torch-cuda":
        import cupy
        import torch

        if bf16:
            return torch.from_dlpack(array.view(cupy.int16)).view(torch.bfloat16)
        return torch.from_dlpack(array)
    return array
