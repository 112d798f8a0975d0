"""TMA descriptors: enum values checked against ``cuda.h``, and the argument cells that re-encode a
descriptor whenever its buffer's pointer changes (encoding itself needs the driver: GPU tests)."""

from __future__ import annotations

import ctypes
import re


from cuvil_dsl.codegen.artifact import KernelArg, TensorMap
from cuvil_dsl.runtime import tensor_maps
from cuvil_dsl.runtime.modules import ArgumentCells, _parameter_array
from cuvil_dsl.types import DType



def _enum(cuda_h: str, type_name: str) -> list[str]:
    body = re.search(rf"typedef enum {type_name}_enum \{{(.*?)\}}", cuda_h, re.S).group(1)
    return [line.split("=")[0].strip().rstrip(",") for line in body.splitlines() if line.strip().startswith("CU_")]


def test_enum_values_are_the_headers(cuda_h):
    types = _enum(cuda_h, "CUtensorMapDataType")
    assert types.index("CU_TENSOR_MAP_DATA_TYPE_FLOAT16") == tensor_maps.DATA_TYPE[DType.F16]
    assert types.index("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16") == tensor_maps.DATA_TYPE[DType.BF16]
    assert types.index("CU_TENSOR_MAP_DATA_TYPE_FLOAT32") == tensor_maps.DATA_TYPE[DType.F32]
    assert _enum(cuda_h, "CUtensorMapSwizzle").index("CU_TENSOR_MAP_SWIZZLE_128B") == tensor_maps.SWIZZLE_128B
    assert (_enum(cuda_h, "CUtensorMapL2promotion").index("CU_TENSOR_MAP_L2_PROMOTION_L2_256B")
            == tensor_maps.L2_PROMOTION_256B)
    assert _enum(cuda_h, "CUtensorMapInterleave")[tensor_maps.INTERLEAVE_NONE] == "CU_TENSOR_MAP_INTERLEAVE_NONE"
    assert (_enum(cuda_h, "CUtensorMapFloatOOBfill")[tensor_maps.OOB_FILL_ZERO]
            == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")
    assert re.search(r"#define CU_TENSOR_MAP_NUM_QWORDS 16\b", cuda_h)  # 128 bytes
    signature = re.search(r"CUresult CUDAAPI cuTensorMapEncodeTiled\((.*?)\);", cuda_h, re.S).group(1)
    assert signature.count(",") + 1 == 12


def test_cell_is_128_byte_aligned():
    cell = tensor_maps.TensorMapCell()
    assert cell.address % 128 == 0 and len(cell.value) == 128


def test_cells_reencode_a_map_when_its_buffer_moves(monkeypatch):
    encoded = []

    def fake_encode(cell, spec, dtype, pointer):
        encoded.append((spec.buffer, pointer))
        ctypes.memmove(cell.address, pointer.to_bytes(8, "little"), 8)

    monkeypatch.setattr(tensor_maps, "encode", fake_encode)
    spec = TensorMap("a", (64, 256), 128, (64, 128))
    arg = KernelArg("tensormap", "tma_a", DType.F16, "const __grid_constant__ cvl_tensor_map", spec)
    cells = ArgumentCells()
    cells.set_pointer("a", 0x1000)
    cell = cells.tensor_map(arg)
    assert encoded == [("a", 0x1000)] and cells.tensor_map(arg) is cell  # one cell per argument
    version = cells.version
    cells.set_pointer("b", 0x2000)  # another buffer: the map stays
    assert encoded == [("a", 0x1000)] and cells.changed_since(version) == {"b"}
    version = cells.version
    cells.set_pointer("a", 0x3000)
    assert encoded[-1] == ("a", 0x3000) and cells.changed_since(version) == {"a", "tma_a"}
    assert cell.value[:8] == (0x3000).to_bytes(8, "little")
    cells.set_pointer("a", 0x3000)  # the same pointer: nothing to encode
    assert len(encoded) == 2


def test_parameter_array_points_at_the_aligned_descriptor(monkeypatch):
    monkeypatch.setattr(tensor_maps, "encode", lambda cell, spec, dtype, pointer: None)

    class Kernel:
        args = (KernelArg("buffer", "a", DType.F16, "const __half* __restrict__"),
                KernelArg("tensormap", "tma_a", DType.F16, "const __grid_constant__ cvl_tensor_map",
                          TensorMap("a", (64, 64), 128, (64, 64))))

    cells = ArgumentCells()
    params, chosen = _parameter_array(Kernel, cells)
    assert params[0] == ctypes.addressof(cells.pointer("a")) and params[1] == chosen[1].address


def test_three_dimensional_maps_pass_the_batch_stride(monkeypatch):
    """A batched operand's map (cuda_wgmma.batch_view): rank 3, the row and batch strides in that order, a box one
    batch deep; a map whose rank, box and batch stride disagree is refused before the driver sees it."""
    import pytest

    from cuvil_dsl.diagnostics import InternalError

    seen = {}

    def fake_encode_tiled():
        def call(address, dtype, rank, pointer, dims, strides, box, ones, *rest):
            seen.update(rank=rank, dims=list(dims[:rank]), strides=list(strides[:rank - 1]), box=list(box[:rank]),
                        ones=list(ones[:rank]))
            return 0
        return call

    monkeypatch.setattr(tensor_maps, "_encode_tiled", fake_encode_tiled)
    cell = tensor_maps.TensorMapCell()
    tensor_maps.encode(cell, TensorMap("a", (4096, 1024, 16), 8192, (64, 128, 1), 8192 * 1024), DType.F16, 0x10000)
    assert seen == {"rank": 3, "dims": [4096, 1024, 16], "strides": [8192, 8192 * 1024], "box": [64, 128, 1],
                    "ones": [1, 1, 1]}
    tensor_maps.encode(cell, TensorMap("a", (4096, 1024), 8192, (64, 128)), DType.F16, 0x10000)
    assert seen["rank"] == 2 and seen["strides"] == [8192]
    for bad in (TensorMap("a", (4096, 1024, 16), 8192, (64, 128)),  # a box of two dims
                TensorMap("a", (4096, 1024, 16), 8192, (64, 128, 1)),  # no batch stride
                TensorMap("a", (4096, 1024), 8192, (64, 128), 4096)):  # a batch stride without a batch
        with pytest.raises(InternalError):
            tensor_maps.encode(cell, bad, DType.F16, 0x10000)
