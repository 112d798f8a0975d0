"""Debug: why a clusters-of-16 attention band fails to launch (session 17)."""
import ctypes, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import ab_attention as ab
import cupy
from cuvil_dsl.runtime import modules, clusters
lib = ctypes.CDLL("libcuda.so.1")

def attr(fn, a):
    v = ctypes.c_int(-1)
    rc = lib.cuFuncGetAttribute(ctypes.byref(v), ctypes.c_int(a), ctypes.c_void_p(fn))
    return rc, v.value

seen = []
orig = modules.load_kernels
def spy(kernels, units, cells, max_shared):
    out = orig(kernels, units, cells, max_shared)
    for name, lk in out.items():
        k = lk.kernel
        seen.append(lk)
        print("LOADED", name, "grid", k.grid, "dims", lk._dims, "smem", k.shared_bytes, "pc", k.persistent_cluster,
              "nonportable", attr(lk._fn, 14), "reqw", attr(lk._fn, 11), "maxdyn", attr(lk._fn, 8),
              "regs", attr(lk._fn, 4), "static", attr(lk._fn, 1), "fit", clusters.max_active_clusters(k, lk._fn), flush=True)
    return out
modules.load_kernels = spy

class Attr(ctypes.Structure):  # CUlaunchAttribute: id, pad, value (64-byte union)
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("x", ctypes.c_uint), ("y", ctypes.c_uint),
                ("z", ctypes.c_uint), ("rest", ctypes.c_char * 52)]

loaded, pipeline, binding = ab.load(ROOT / "benchmarks" / "attention_f16.yaml")
host = ab.fresh_inputs(binding, pipeline, 1)
for tuning in ({"cluster_tiles": 2, "cluster_max": 16, "cluster": (1, 4, 1.0, True), "prefetch": False},
               {"cluster_tiles": 2, "cluster_max": 16}):
    print("TUNING", tuning, flush=True)
    try:
        built = ab.Built(loaded, pipeline, binding, host, True, "sm_90a", tuning)
        built.run()
        cupy.cuda.runtime.deviceSynchronize()
        print("launch ok", flush=True)
    except Exception as exc:
        print("FAILED:", type(exc).__name__, exc, flush=True)
        lk = seen[-1]
        gx, gy, gz, bx, by, bz = lk._dims
        for cl in (16, 8):
            a = Attr(4, b"", cl, 1, 1, b"")  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
            cfg = clusters.LaunchConfig(gx, gy, gz, bx, by, bz, lk._shared, None, ctypes.cast(ctypes.pointer(a), ctypes.c_void_p), 1)
            rc = lib.cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(lk._fn), ctypes.c_void_p(lk._params_ptr), None)
            print("cuLaunchKernelEx with cluster attr", cl, "->", rc, flush=True)
            cfg0 = clusters.LaunchConfig(gx, gy, gz, bx, by, bz, lk._shared, None, None, 0)
        rc = lib.cuLaunchKernelEx(ctypes.byref(cfg0), ctypes.c_void_p(lk._fn), ctypes.c_void_p(lk._params_ptr), None)
        print("cuLaunchKernelEx, no attrs ->", rc, flush=True)
        try:
            cupy.cuda.runtime.deviceSynchronize(); print("sync ok")
        except Exception as e2:
            print("sync:", e2)
            break
