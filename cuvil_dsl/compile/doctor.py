"""Environment checks for ``cuvil-dsl doctor``: can this machine compile, inspect and run kernels?

Every check is guarded: a missing GPU, driver, NVRTC or tool becomes a ``warn``/``fail``
row, never an exception, because doctor is what people run when things are broken.
"""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

from cuvil_dsl import knobs
from cuvil_dsl.compile import nvcc, nvrtc, sass
from cuvil_dsl.compile.admin import cache_info

Status = Literal["ok", "warn", "fail"]


class DoctorRow(NamedTuple):
    check: str
    value: str
    status: Status
    detail: str


def _gpu_rows() -> tuple[list[DoctorRow], int]:
    """GPU and driver rows plus the driver's CUDA version (0 when there is no driver)."""
    try:
        from cupy.cuda import runtime
    except Exception as exc:  # CuPy missing or broken: nothing GPU-side can be checked
        return [DoctorRow("GPU", "unknown", "fail", f"CuPy cannot be imported: {exc}")], 0
    try:
        driver = int(runtime.driverGetVersion())
    except Exception:  # no libcuda at all
        driver = 0
    rows = []
    try:
        count = runtime.getDeviceCount()
        for index in range(count):
            props = runtime.getDeviceProperties(index)
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            rows.append(DoctorRow(f"GPU {index}", name, "ok", f"sm_{props['major']}{props['minor']}, "
                                  f"{props['totalGlobalMem'] / 2**30:.0f} GiB"))
        if count == 0:
            rows.append(DoctorRow("GPU", "none", "warn", "compiling works; running kernels needs a GPU"))
    except Exception as exc:  # cudaErrorInsufficientDriver / NoDevice on a build machine
        rows.append(DoctorRow("GPU", "no GPU", "warn", f"compiling works; running needs a GPU ({exc})"))
    if driver:
        shown = f"{driver // 1000}.{driver % 1000 // 10}"
        rows.append(DoctorRow("CUDA driver", shown, "ok", f"driverGetVersion={driver}"))
    else:
        rows.append(DoctorRow("CUDA driver", "none", "warn", "no libcuda: kernels can be compiled, not run"))
    return rows, driver


def _nvrtc_rows(driver: int) -> list[DoctorRow]:
    try:
        version = nvrtc.version()
        archs = nvrtc.supported_archs()
    except nvrtc.NvrtcUnavailable as exc:
        return [DoctorRow("NVRTC", "missing", "fail", str(exc))]
    rows = [DoctorRow("NVRTC", version, "ok", "archs: " + " ".join(f"sm_{a}" for a in archs))]
    if driver:
        major, minor = (int(p) for p in version.split("."))
        if major * 1000 + minor * 10 > driver:
            detail = "PTX from this NVRTC would not load on this driver; cuvil-dsl ships CUBIN, so kernels still load"
            rows.append(DoctorRow("driver vs NVRTC", f"{driver} < {major * 1000 + minor * 10}", "warn", detail))
        else:
            rows.append(DoctorRow("driver vs NVRTC", "compatible", "ok", "the driver is at least as new as NVRTC"))
    headers = nvrtc.header_dir()
    if headers and os.path.isfile(os.path.join(headers, "cuda_fp16.h")):
        rows.append(DoctorRow("CUDA headers", headers, "ok", "cuda_fp16.h / cuda_bf16.h found"))
    else:
        rows.append(DoctorRow("CUDA headers", headers or "missing", "warn",
                              "half-precision kernels need cuda_fp16.h: pip install 'nvidia-cuda-runtime==13.0.*'"))
    return rows


def _tool_rows() -> list[DoctorRow]:
    rows = []
    try:
        path = nvcc.find_nvcc()
        rows.append(DoctorRow("nvcc", nvcc.version(path), "ok", path))
    except nvcc.NvccUnavailable as exc:
        rows.append(DoctorRow("nvcc", "missing", "warn", f"no fallback compiler: {exc}"))
    try:
        import cupy

        rows.append(DoctorRow("CuPy", cupy.__version__, "ok", os.path.dirname(cupy.__file__)))
    except Exception as exc:  # broken install: report, do not crash doctor
        rows.append(DoctorRow("CuPy", "missing", "fail", str(exc)))
    tool = sass.find_cuobjdump()
    if tool:
        rows.append(DoctorRow("cuobjdump", "found", "ok", tool))
    else:
        rows.append(DoctorRow("cuobjdump", "missing", "warn",
                              "SASS checks need: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"))
    return rows


def _cache_rows() -> list[DoctorRow]:
    info = cache_info()
    if info["disabled_by_knob"]:
        return [DoctorRow("compile cache", info["dir"], "warn", "disabled by CUVIL_DISABLE_CACHE")]
    if not info["enabled"]:
        return [DoctorRow("compile cache", info["dir"], "warn", f"refused: {info['refused']}")]
    mode = oct(os.stat(info["dir"]).st_mode & 0o777)
    return [DoctorRow("compile cache", info["dir"], "ok",
                      f"{info['entries']} entries, {info['bytes'] / 2**20:.1f} MiB, mode {mode}, "
                      f"{info['failed_sources']} saved failures")]


def doctor() -> list[DoctorRow]:
    """Every check, in the order a person would debug them."""
    gpu, driver = _gpu_rows()
    rows = gpu + _nvrtc_rows(driver) + _tool_rows() + _cache_rows()
    workers = knobs.values.compile_workers
    rows.append(DoctorRow("compile workers", str(workers), "ok", "CUVIL_COMPILE_WORKERS"))
    return rows


def render_doctor(rows: list[DoctorRow]) -> str:
    """A plain text table: check, value, status, detail."""
    header = DoctorRow("check", "value", "status", "detail")  # type: ignore[arg-type]
    table = [header, *rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(3)]
    lines = []
    for row in table:
        cells = [str(row[i]).ljust(widths[i]) for i in range(3)]
        lines.append("  ".join(cells) + "  " + row.detail)
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 6)
    return "\n".join(lines)
