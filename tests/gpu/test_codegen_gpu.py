"""Generated kernels on a real GPU against the float64 reference.

Every spec of ``specs/`` and every program of ``tests/codegen/programs/`` is loaded and bound
as ``cuvil-dsl run`` does, planned, rendered for the device's arch, compiled with NVRTC and
launched in plan order through the runtime's argument cells (host statements skipped); every result must match
``cuvil_dsl.reference.execute`` within the spec's tolerances (LANGUAGE.md section 7), NaN
matching NaN. Together they cover every kernel kind, every dtype, every builtin,
broadcasting, transposed operands, sizes that are not multiples of any tile or vector, and
NaN/inf inputs. Output buffers start as NaN (or 0xFF bytes) so a missed store shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl.types import DType, concrete_shape

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codegen"))
from codegen_cases import Case, case_id, case_paths, load_case  # noqa: E402

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def _device_array(host: np.ndarray, dtype: DType):
    if dtype is DType.BF16:
        return cupy.asarray(host.view(np.uint16))
    if dtype is DType.BOOL:
        return cupy.asarray(host.astype(np.uint8))
    return cupy.asarray(host)


def _poisoned(shape: tuple, dtype: DType):
    """An output buffer whose every element is NaN (floats) or 0xFF bytes (others)."""
    if dtype in (DType.F16, DType.F32, DType.F64):
        return cupy.full(shape, np.nan, dtype=dtype.numpy)
    storage = {DType.BF16: np.uint16, DType.BOOL: np.uint8, DType.I32: np.int32}[dtype]
    return cupy.full(shape, np.iinfo(storage).max, dtype=storage)


def _host_array(dev, dtype: DType) -> np.ndarray:
    data = cupy.asnumpy(dev)
    if dtype is DType.BF16:
        return data.view(dtype.numpy)
    if dtype is DType.BOOL:
        return data.astype(bool)
    return data


def _uniform_values(plan, params: dict) -> dict:
    from cuvil_dsl.reference.executor import eval_op

    env = dict(params)
    for op in plan.host_ops:
        env[op.out] = eval_op(op, env)
    return env


class Prepared:
    """One case compiled, loaded and bound to device buffers: ``launches`` in plan order."""

    def __init__(self, case: Case):
        from cuvil_dsl.codegen import render_cuda
        from cuvil_dsl.compile import CompileUnit, compile_units
        from cuvil_dsl.runtime.device import device_arch, max_dynamic_shared_bytes
        from cuvil_dsl.runtime.modules import ArgumentCells, load_kernels

        arch = device_arch()
        plan = case.plan(arch)
        sizes = case.binding.sizes
        self.case, self.host = case, case.inputs()
        rendered = render_cuda(plan, sizes, arch, tf32=case.tf32)
        units = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options) for k in rendered], arch)
        self.buffers = {
            b.name: _device_array(self.host[b.name], b.type.dtype) if b.role == "input"
            else _poisoned(concrete_shape(b.type.shape, sizes), b.type.dtype)
            for b in plan.buffers
        }
        # launched as the executor launches them: argument cells and prebuilt parameter arrays (kernels
        # may take TMA descriptors by value, which CuPy's kernel call cannot pass)
        self.cells = ArgumentCells()
        for name, array in self.buffers.items():
            self.cells.set_pointer(name, array.data.ptr)
        loaded = load_kernels(rendered, units, self.cells, max_dynamic_shared_bytes())
        self.cells.set_uniforms(_uniform_values(plan, case.binding.params))
        self.launches = [loaded[fused.name] for fused in plan.kernels]

    def run(self) -> None:
        stream = cupy.cuda.get_current_stream().ptr
        for kernel in self.launches:
            kernel.launch(stream)

    def results(self) -> dict[str, np.ndarray]:
        cupy.cuda.runtime.deviceSynchronize()
        return {r.name: _host_array(self.buffers[r.name], r.type.dtype) for r in self.case.pipeline.results}


def run_on_gpu(case: Case) -> tuple[dict, dict]:
    """The results of the generated kernels and of the reference for one case."""
    from cuvil_dsl.reference import execute

    prepared = Prepared(case)
    prepared.run()
    return prepared.results(), execute(case.pipeline, prepared.host, case.binding.params)


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: DType, rtol: float, atol: float) -> None:
    """LANGUAGE.md section 7's check: NaN matches NaN, infinities match, the rest within tolerance."""
    assert got.shape == want.shape
    if dtype in (DType.I32, DType.BOOL):
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(g) == np.isnan(w)
    assert same_nan.all(), f"NaN positions differ at {np.argwhere(~same_nan)[:5].tolist()}"
    inf = np.isinf(w)
    assert (g[inf] == w[inf]).all(), "infinities differ"
    finite = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[finite]))) if finite.any() else 1.0)
    err = np.abs(g - w)
    bad = finite & ~(err <= atol * scale + rtol * np.abs(w))
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} elements off; first at "
                           f"{np.argwhere(bad)[0].tolist()}: got {g[bad][:3]} want {w[bad][:3]}")


def assert_case_matches(case: Case) -> None:
    """Every result of ``case``'s generated kernels matches the reference within the spec's tolerances."""
    got, want = run_on_gpu(case)
    for r in case.pipeline.results:
        rtol, atol = case.loaded.spec.check.tolerances(r.type.dtype, case.tf32)
        assert_matches(got[r.name], want[r.name], r.type.dtype, rtol, atol)


@pytest.mark.parametrize("path", case_paths(), ids=case_id)
def test_generated_kernels_match_reference(path):
    case = load_case(path)
    assert_case_matches(case)


GEMM_SOFTMAX_CASES = [p for p in case_paths() if p.stem in (
    "attention_scores", "masked_attention", "attention_f16", "attention_bf16_band", "attention_layouts")]


@pytest.mark.parametrize("path", GEMM_SOFTMAX_CASES, ids=case_id)
def test_generic_gemm_softmax_template_matches_reference(path, monkeypatch):
    """The cases above run on the row-band template by default; the generic one stays correct."""
    from cuvil_dsl.codegen import cuda_matmul

    monkeypatch.setattr(cuda_matmul, "ROW_BAND", False)
    case = load_case(path)
    assert_case_matches(case)


def _library_programs():
    from test_wgmma import LIBRARY_PROGRAMS  # tests/codegen is on the path (above)

    return list(LIBRARY_PROGRAMS)


WGMMA_MODES = {  # cuda_wgmma's library switches: (PAIRED_STORES, LARGE_TILE)
    "pairs-256x128": (True, (256, 128, 4, 1)),
    "pairs-128x256": (True, (128, 256, 4, 1)),  # the default
    "elements-128x256": (False, (128, 256, 4, 1)),  # the kernel before the switches
}


@pytest.mark.parametrize("mode", list(WGMMA_MODES))
@pytest.mark.parametrize("name", _library_programs())
def test_wgmma_library_epilogues_match_reference(name, mode, tmp_path, monkeypatch):
    """Plain GEMMs on Hopper's wgmma with paired 16-bit stores (and their fallbacks: odd N, an f32
    result), batched with ragged M and N, bf16, under each library switch setting; elsewhere they
    run mma.sync and must match all the same."""
    from test_wgmma import library_case

    from cuvil_dsl.codegen import cuda_wgmma

    pairs, tile = WGMMA_MODES[mode]
    monkeypatch.setattr(cuda_wgmma, "PAIRED_STORES", pairs)
    monkeypatch.setattr(cuda_wgmma, "LARGE_TILE", tile)
    case = library_case(name, tmp_path)
    assert_case_matches(case)


ROW_TUNINGS = {  # cuda_rows.TUNING settings that change how rows of at most 1024 elements are walked
    "3-rows-a-warp-raw": {"warp_rows": 3, "raw_cache": True},
    "2-rows-a-warp": {"warp_rows": 2},
    "raw-cache": {"raw_cache": True},
    "16-lanes-2-rows-raw": {"row_lanes": 16, "warp_rows": 2, "raw_cache": True},
    "8-lanes": {"row_lanes": 8},
    "3-rows-blocks-of-96": {"warp_rows": 3, "warp_block": 96},
}
# the cases whose kernels include rows a warp takes whole (every dtype, ragged row counts, NaN rows, rows of one)
WARP_ROW_CASES = ("f64_chain", "layernorm", "log_softmax_f32", "masked_fill", "multi_result", "reductions",
                  "softmax", "two_graphs", "bool_logic", "nan_propagation", "norms", "reductions_axes",
                  "rows_of_one", "softmax_short_f16")


@pytest.mark.parametrize("tuning", list(ROW_TUNINGS))
@pytest.mark.parametrize("path", [p for p in case_paths() if p.stem in WARP_ROW_CASES], ids=case_id)
def test_row_template_tunings_match_reference(path, tuning, monkeypatch):
    """Rows a warp takes several at a time (the next one's loads in flight during the current one's
    reductions; row counts that leave the last warp short), and rows cached in their 16-bit storage type."""
    from cuvil_dsl.codegen import cuda_rows

    monkeypatch.setattr(cuda_rows, "TUNING", dict(ROW_TUNINGS[tuning]))
    case = load_case(path)
    assert_case_matches(case)


@pytest.mark.parametrize("mode", list(WGMMA_MODES))
@pytest.mark.parametrize("path", [p for p in case_paths() if p.stem in ("gemm_wgmma", "gemm_bf16", "gemm_f16_layouts")],
                         ids=case_id)
def test_wgmma_gemm_programs_under_each_switch(path, mode, monkeypatch):
    from cuvil_dsl.codegen import cuda_wgmma

    pairs, tile = WGMMA_MODES[mode]
    monkeypatch.setattr(cuda_wgmma, "PAIRED_STORES", pairs)
    monkeypatch.setattr(cuda_wgmma, "LARGE_TILE", tile)
    case = load_case(path)
    assert_case_matches(case)


def _gelu_gemm_case(tmp_path, name: str, m: int, n: int, k: int, b_t: bool):
    """A case of ``y = gelu(a @ w + bias)`` (f16; w stored [N, K] with ``b_t``) and its one kernel, rendered for
    sm_90."""
    from cuvil_dsl.codegen import render_cuda

    b, use = ("w: f16[N, K]", "a @ w.T") if b_t else ("w: f16[K, N]", "a @ w")
    (tmp_path / f"{name}.cuvil").write_text(f"pipeline {name}(a: f16[M, K], {b}, bias: f16[N]) -> y: f16[M, N] {{\n"
                                            f"    y = gelu({use} + bias)\n}}\n")
    (tmp_path / f"{name}.yaml").write_text(f"pipeline: {name}.cuvil\nshapes: {{M: {m}, K: {k}, N: {n}}}\n"
                                           "check: {rtol: 8.0e-3, atol: 8.0e-3}\n")
    case = load_case(tmp_path / f"{name}.yaml")
    (kernel,) = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
    return case, kernel


@pytest.mark.parametrize("ws", [False, "tma"], ids=["plain", "warp-specialised"])
@pytest.mark.parametrize("b_t", [False, True], ids=["b-KxN", "b-NxK"])
def test_wgmma_pairs_sharing_b_match_reference(b_t, ws, tmp_path, monkeypatch):
    """TMA kernels in clusters of 2 along M sharing each B tile by multicast (cuda_wgmma.MULTICAST): the
    plain kernel and the persistent warp-specialised one (a pair tile at a time, 144 pair tiles on at
    most 66 clusters); M ragged (4000 rows: 32 row tiles, the last pair's second CTA mostly past M), N
    and K ragged too (N a multiple of 8: TMA needs 16-byte row strides), B stored [K, N] (each CTA two
    of the four 64-column boxes) or [N, K] (a box of half the tile's rows)."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "LIBRARY_WS", ws)
    monkeypatch.setattr(cuda_wgmma, "MULTICAST", "ws" if ws else True)
    monkeypatch.setattr(cuda_wgmma, "NARROW_TILE", None)  # 288 tiles of 128 x 256 (3 waves) or 352 of 128 x 192
    case, k = _gelu_gemm_case(tmp_path, "pairs", 4000, 2104, 200, b_t)
    assert "__cluster_dims__(2, 1, 1)" in k.source and "cvl_tma_2d_mc(" in k.source
    assert ("setmaxnreg" in k.source) == bool(ws)
    assert_case_matches(case)


@pytest.mark.parametrize("b_t", [False, True], ids=["b-KxN", "b-NxK"])
def test_wgmma_narrow_tile_matches_reference(b_t, tmp_path):
    """cuda_wgmma.NARROW_TILE: 128 x 192 tiles where 128 x 256 ones would end in a thin last wave (132 tiles of
    128 x 192 against 99 of 128 x 256); M, N and K ragged (1400 rows: the last row tile 120; 2296 columns: the last
    column tile 184, a B box of 64 columns past N; K = 200: the last k step 8 deep), B stored [K, N] (three
    64-column boxes a stage) or [N, K] (one box of 192 rows)."""
    case, k = _gelu_gemm_case(tmp_path, "narrow", 1400, 2296, 200, b_t)
    assert "m64n192k16" in k.source and k.grid == (11 * 12, 1, 1)
    assert_case_matches(case)


# last in the file: a warp-specialised barrier that never completes traps (about a second), and the
# CUDA error would end every later test in this process
@pytest.mark.parametrize("name", [*_library_programs(), "gemm_wgmma"])
def test_wgmma_warp_specialised_library_kernel_matches_reference(name, tmp_path, monkeypatch):
    """cuda_wgmma.LIBRARY_WS (off by default): the persistent producer / consumer kernel for launches
    on LARGE_TILE (wg_batched_pairs: batched, ragged, 288 tiles on 132 blocks; gemm_wgmma's z: bf16,
    B stored N x K, K = 72); the other kernels are the default ones."""
    from test_wgmma import library_case

    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "LIBRARY_WS", True)
    case = (load_case(next(p for p in case_paths() if p.stem == name)) if name == "gemm_wgmma"
            else library_case(name, tmp_path))
    assert_case_matches(case)


@pytest.mark.parametrize("fit", [1, 3])
def test_persistent_cluster_kernels_match_on_fewer_clusters(fit, monkeypatch):
    """The lagged cluster band walks its bands by gridDim: launched with 1 or 3 clusters instead of the
    8 it was rendered with (as on a part that runs fewer at once; runtime/clusters.py), each cluster
    takes several rounds of the lagged exchange and the results still match the reference."""
    from cuvil_dsl.runtime import clusters

    asked = []
    real = clusters.max_active_clusters
    monkeypatch.setattr(clusters, "max_active_clusters",
                        lambda kernel, function: asked.append(real(kernel, function)) or fit)
    case = load_case(next(p for p in case_paths() if p.stem == "attention_cluster"))
    prepared = Prepared(case)
    lagged = [k for k in prepared.launches if k.kernel.persistent_cluster]
    assert len(lagged) == 3 and all(k.grid == (fit * k.kernel.persistent_cluster, 1, 1) != k.kernel.grid
                                    for k in lagged)  # clusters of 4, 4 and 6
    assert all(n is not None and n >= 8 for n in asked)  # the H200's driver: at least the 8 rendered
    prepared.run()
    got = prepared.results()
    from cuvil_dsl.reference import execute

    want = execute(case.pipeline, prepared.host, case.binding.params)
    for r in case.pipeline.results:
        rtol, atol = case.loaded.spec.check.tolerances(r.type.dtype, case.tf32)
        assert_matches(got[r.name], want[r.name], r.type.dtype, rtol, atol)


@pytest.mark.parametrize("tuning", [{"lazy": True}, {"lazy": False}, {"quad_merge": True}, {"quad_merge": False},
                                    {"prefetch": False}, {"interleave": False}, {"interleave0": False},
                                    {"out_base": False}, {"part_pad": 0}, {"a_regs": False}], ids=str)
@pytest.mark.parametrize("stem", ["attention_lazy", "attention_cluster", "attention_f16", "attention_deep"])
def test_cluster_band_switches_match_reference(stem, tuning, monkeypatch):
    """The lagged cluster band with and without lazy bases (cuda_band_cluster.LAZY; attention_lazy's
    tilted logits send about 40% of the later tiles back to their maximum, the slow path, the other
    programs' logits keep their bases or walk a mask, never lazy) and with the exchange split across a
    row's four lanes or not (QUAD_MERGE; attention_cluster's `six` has clusters of 6), with one A
    buffer and the next band's loads after its last tile (PREFETCH off), and with the write pieces
    after the tiles' exps instead of among them (INTERLEAVE off; attention_lazy's slow path redoes a
    tile whose piece has already gone out among its first pass's exps), with the first piece after tile
    0 instead of in tile 1's pass (INTERLEAVE0 off), with each piece's addresses from the band's
    coordinates (OUT_BASE off), and with every wgmma reading the A band from shared memory (A_REGS off);
    attention_deep runs each with K in two 64-wide atoms (D 128, and 80 with the second atom part zeros)."""
    from cuvil_dsl.codegen import cuda_matmul

    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", tuning)
    case = load_case(next(p for p in case_paths() if p.stem == stem))
    assert_case_matches(case)


@pytest.mark.parametrize("tuning", [{}, {"prefetch": False}, {"interleave0": False}, {"a_regs": False}], ids=str)
@pytest.mark.parametrize("n", [384, 448])
def test_lagged_band_odd_tile_counts_match_reference(n, tuning, tmp_path, monkeypatch):
    """The lagged band asked for on clusters of 2 CTAs (its default needs 4): N = 384 gives each CTA 3
    column tiles, so the ring's two B slots take unequal loads a band and the next band's tiles 0 and 1
    are loaded after tiles 1 and 2 (with PREFETCH); N = 448 gives 4 tiles, the last CTA's last one masked
    (so no interleaved write: it needs every column unmasked)."""
    from cuvil_dsl.codegen import cuda_band_cluster, cuda_matmul

    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster": (1, None, 0.9, True), **tuning})
    (tmp_path / "odd.cuvil").write_text(
        "pipeline odd(q: f16[B, M, D], k: f16[B, N, D]) -> p: f16[B, M, N] {\n"
        "    kernel s { p = softmax(q @ k.T * 0.125, axis=-1) }\n}\n")
    (tmp_path / "odd.yaml").write_text(
        f"pipeline: odd.cuvil\nshapes: {{B: 3, M: 1000, N: {n}, D: 64}}\ncheck: {{rtol: 2.0e-3, atol: 2.0e-3}}\n")
    case = load_case(tmp_path / "odd.yaml")
    assert cuda_band_cluster.layout(n) == (2, 3 if n == 384 else 4)
    assert_case_matches(case)


@pytest.mark.parametrize("name", ["gemm_wgmma", "gemm_split_k", "gemm_grouped_walk", "gemm_f16_layouts", "gemm_bf16"])
def test_refill_first_gemm_loops_match_reference(name, monkeypatch):
    """cuda_wgmma.REFILL_FIRST (an A/B switch, session 36): the TMA main loop refills a stage before waiting for the
    step's tile. Ragged M, N and K, both B layouts, split-K parts and their meetings, grouped walks, bf16."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "REFILL_FIRST", True)
    case = load_case(next(p for p in case_paths() if p.stem == name))
    assert_case_matches(case)


WIDE = """pipeline wide(q: f16[B, M, D], k: f16[B, N, D], qpos: i32[M, 1], kpos: i32[1, N], nramp: f16[N, 1],
                   qb: bf16[B, M, D], kb: bf16[B, N, D], qd: f16[B, M, E], kd: f16[B, N, E]) -> (p: f16[B, M, N],
                   c: f16[B, M, N], t: f16[B, M, N], b: bf16[B, M, N], d: f16[B, M, N]) {
    causal = kpos <= qpos
    kernel scaled { p = softmax(q @ k.T * 0.125, axis=-1) }
    kernel masked { c = softmax(where(causal, q @ k.T, -1e9), axis=-1) }
    kernel tilt { kk = k + nramp * 0.004 }
    kernel tilted { t = softmax(q @ kk.T * 0.25, axis=-1) }
    kernel bfloat { b = softmax(qb @ kb.T * 0.125, axis=-1) }
    kernel deep { d = softmax(qd @ kd.T * 0.088, axis=-1) }
}
"""


@pytest.mark.parametrize("tuning", [{}, {"prefetch": False}, {"interleave": False}, {"lazy": False}], ids=str)
@pytest.mark.parametrize("n", [2048, 1800, 4096])
def test_lagged_band_of_eight_tiles_matches_reference(n, tuning, tmp_path, monkeypatch):
    """ROW_BAND_TUNING "cluster_tiles" 8 (ab_attention.py, session 36): clusters of 4 CTAs of 8 column tiles, 2 CTAs
    a multiprocessor. `scaled` folds its scale (and keeps lazy bases), `masked` walks a causal mask, `tilted` sends
    rows back to a tile's maximum (the lazy slow path, as attention_lazy does), `bfloat` scales its bf16 output in
    f32, `deep` holds K in two 64-wide atoms (D 128: one CTA a multiprocessor); ragged M = 200, at N = 1800 the
    last CTA's fifth tile ragged and its last three masked whole, and N = 4096 in clusters of 8 (one pass; the
    default takes two-pass bands there)."""
    from cuvil_dsl.codegen import cuda_band_cluster, cuda_matmul

    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster_tiles": 8, **tuning})
    (tmp_path / "wide.cuvil").write_text(WIDE)
    (tmp_path / "wide.yaml").write_text(
        f"pipeline: wide.cuvil\nshapes: {{B: 2, M: 200, N: {n}, D: 64, E: 128}}\n"
        "inputs:\n  qpos: {init: arange}\n  kpos: {init: arange}\n  nramp: {init: arange}\n"
        "check: {rtol: 4.0e-3, atol: 4.0e-3}\n")
    case = load_case(tmp_path / "wide.yaml")
    assert cuda_band_cluster.layout(n) == (8 if n == 4096 else 4, 8)
    got, want = run_on_gpu(case)
    for r in case.pipeline.results:
        # tighter than the spec's 4e-3 (most probabilities here are below it): the module docstring's bound, three
        # roundings of 2^-11 plus 2^-20 (bf16: the output's own 2^-8 instead), and the reference's rounding, with margin
        rtol = 3e-3 if r.type.dtype is DType.F16 else 1.6e-2
        assert_matches(got[r.name], want[r.name], r.type.dtype, rtol, 4e-6)


def test_split_k_exchanges_give_the_same_bits(monkeypatch):
    """gemm_split_k's GEMMs in clusters (two parts, and 4 or 8 parts as clusters of two) meet through the
    workspace from the accumulators (cuda_wgmma.SPLIT_EXCHANGE "l2", the default) or in distributed shared
    memory ("dsmem"): both add every part in rank order, so both match float64 and give the same bits."""
    from cuvil_dsl.codegen import cuda_wgmma

    case = load_case(Path(__file__).parents[1] / "codegen" / "programs" / "gemm_split_k.yaml")
    results = {}
    for exchange in ("l2", "dsmem"):
        monkeypatch.setattr(cuda_wgmma, "SPLIT_EXCHANGE", exchange)
        got, want = run_on_gpu(case)
        for r in case.pipeline.results:
            rtol, atol = case.loaded.spec.check.tolerances(r.type.dtype, case.tf32)
            assert_matches(got[r.name], want[r.name], r.type.dtype, rtol, atol)
        results[exchange] = got
    for r in case.pipeline.results:
        np.testing.assert_array_equal(np.ascontiguousarray(results["l2"][r.name]).view(np.uint8),
                                      np.ascontiguousarray(results["dsmem"][r.name]).view(np.uint8))


def _check_fused_attention(case, seed: int, special_rows: bool) -> np.ndarray:
    """Run ``case`` on inputs drawn from ``seed`` (``special`` with special rows when asked), compare with
    the reference; returns the result ``o``."""
    from cuvil_dsl.reference import execute

    prepared = Prepared(case)
    rng = np.random.default_rng(seed)
    for p in case.pipeline.tensor_params:
        if not p.type.dtype.is_float:
            continue
        host = prepared.host[p.name]
        fresh = (rng.normal(size=host.shape) * (3.0 if p.name == "q" else 1.0)).astype(host.dtype)
        if p.name == "special" and special_rows:
            fresh[1, :] = -np.inf
            fresh[2, 5], fresh[3, 7] = np.nan, np.inf
            fresh[4, ::2] = -np.inf
        prepared.host[p.name] = fresh
        prepared.buffers[p.name][...] = _device_array(fresh, p.type.dtype)
    prepared.run()
    got = prepared.results()
    want = execute(case.pipeline, prepared.host, case.binding.params)
    for r in case.pipeline.results:
        rtol, atol = case.loaded.spec.check.tolerances(r.type.dtype, case.tf32)
        try:
            assert_matches(got[r.name], want[r.name], r.type.dtype, rtol, atol)
        except AssertionError as exc:
            raise AssertionError(f"inputs of seed {seed}: {exc}") from None
    return got["o"]


@pytest.mark.parametrize("block", [None, 64, 128, 256])
@pytest.mark.parametrize("stem", ["attention_fused", "attention_fused_bf16", "attention_fused_deep",
                                  "attention_fused_hopper"])
def test_fused_attention_on_fresh_inputs_and_special_rows(stem, block, tmp_path):
    """The attention kernels (codegen/cuda_attention.py) on inputs drawn afresh each run (the seed in the
    message), at their default block and at 2, 4 and 8 warps: on sm_90 attention_fused and _hopper run
    the wgmma kernel (1 or 2 warpgroups) except at 64 threads, the others mma.sync; attention_fused_bf16's
    bias gets a row all ``-inf`` (NaN out, as NumPy gives), a NaN, a ``+inf`` and a row half masked."""
    import os

    path = next(p for p in case_paths() if p.stem == stem)
    if block is not None:  # the same program with the attention kernel's threads set (its name from the plan)
        for f in (path, path.with_suffix(".cuvil")):
            (tmp_path / f.name).write_text(f.read_text())
        kernel = next(k.name for k in load_case(path).plan("sm_90").kernels if k.kind == "attention")
        spec = tmp_path / path.name
        spec.write_text(spec.read_text() + f"kernels:\n  {kernel}: {{block: {block}}}\n")
        path = spec
    o = _check_fused_attention(load_case(path), int.from_bytes(os.urandom(4), "little"), True)
    if stem == "attention_fused_bf16":
        o = o.astype(np.float64)
        assert np.isnan(o[:, 1:4]).all() and np.isfinite(o[:, [0, 4, 5]]).all()


@pytest.mark.parametrize("tuning", [{}, {"ws": False, "overlap": True}, {"ws": False, "bn": 128}, {"wgmma": False},
                                    {"ws": False},
                                    {"ws": True, "overlap": False}, {"ws": True, "bn": 64, "stages": 1},
                                    {"ws": True, "groups": 3, "bn": 64, "stages": 3}, {"ws": True, "pingpong": True},
                                    {"ws": True, "pingpong": True, "bn": 176, "groups": 2}, {"ws": True, "groups": 1},
                                    {"ws": True, "persistent": 2}, {"ws": True, "persistent": 3, "groups": 2, "bn": 64},
                                    {"ws": True, "chains": (4, 4)}, {"ws": True, "chains": (2, 4), "groups": 1},
                                    {"wgmma": False, "chains": (4, 2)}],
                         ids=str)
@pytest.mark.parametrize("stem", ["attention_fused", "attention_fused_hopper", "one_tile"])
def test_fused_attention_tunings(stem, tuning, tmp_path, monkeypatch):
    """cuda_attention.ATTENTION_TUNING's variants (benchmarks/ab_attention_full.py times them) on the ragged
    programs and on one key tile (N 40 < BN, Dk 32 and Dv 16 padded to 64 for wgmma): the wgmma kernel without a
    producer ("ws": False) with and without overlap, the warp-specialised one's switches (persistent grids of 2
    and 3 blocks walk several work items each; row statistics in chains), mma.sync."""
    import os

    from cuvil_dsl.codegen import cuda_attention

    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", dict(tuning))
    if stem == "one_tile":
        (tmp_path / "one.cuvil").write_text(
            "pipeline one(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, E]) -> o: f16[B, M, E] {\n"
            "    o = softmax(q @ k.T * 0.3) @ v\n}\n")
        (tmp_path / "one.yaml").write_text(
            "pipeline: one.cuvil\nshapes: {B: 3, M: 70, N: 40, D: 32, E: 16}\ncheck: {rtol: 4.0e-3, atol: 4.0e-3}\n")
        case = load_case(tmp_path / "one.yaml")
    else:
        case = load_case(next(p for p in case_paths() if p.stem == stem))
    _check_fused_attention(case, int.from_bytes(os.urandom(4), "little"), False)


@pytest.mark.parametrize("form", ["bool mask", "positions"])
@pytest.mark.parametrize("tuning", [{}, {"groups": 4, "bn": 64, "persistent": 3}, {"groups": 2, "persistent": 2},
                                    {"groups": 1, "chains": (1, 1)}], ids=str)
def test_skipped_masked_tiles_give_the_same_bits(tuning, form, tmp_path, monkeypatch):
    """ATTENTION_TUNING "skip": key tiles that the mask hides from every row of a consumer are left out once the rows'
    maxima put the fill's numerator at 0, which adds nothing: the outputs are bit for bit those of the kernel
    without skipping, and match the reference. The mask is causal with holes: rows masked whole (softmax uniform
    over the fill: never skipped), and a block of keys hidden from a band of rows (tiles skipped in the middle of
    a row, unmasked ones after), on ragged M and N; fresh inputs each run. Two forms: a bool [M, N] input (each
    element tested), and positions compared, ``kpos <= qpos`` (the separable test: a key against its warp's
    largest row position), whose positions are out of order (a block of keys moved past every row, and rows moved
    before every key)."""
    M, N = 333, 700
    if form == "bool mask":
        signature, cond = "mask: bool[M, N]", "mask"
        mask = np.arange(N)[None, :] <= np.arange(M)[:, None] + 40
        mask[5:10] = False
        mask[100:200, 256:384] = False
        extra = {"mask": (mask, DType.BOOL)}
    else:
        signature, cond = "qpos: i32[M, 1], kpos: i32[1, N]", "kpos <= qpos"
        qpos = np.arange(M, dtype=np.int32)[:, None] + 40
        qpos[5:10] = -1  # before every key: masked whole
        kpos = np.arange(N, dtype=np.int32)[None, :].copy()
        kpos[0, 256:384] = 10_000  # past every row: hidden from all of them
        extra = {"qpos": (qpos, DType.I32), "kpos": (kpos, DType.I32)}
    _masked_bits(tmp_path, monkeypatch, M, N, signature, cond, extra, [{**tuning, "skip": skip} for skip in (False, True)],
                 lambda source, t: (("cvl_wg_all" in source) is t["skip"]  # the skipping loop, or not
                                    and ("cvl_rows" in source) is (t["skip"] and form == "positions")))


def _masked_bits(tmp_path, monkeypatch, M: int, N: int, signature: str, cond: str, extra: dict, tunings: list[dict],
                 expect, scale: str = "0.125", same_bits: bool = True) -> list:
    """Masked attention ``softmax(where(cond, q k^T * scale, -30000)) @ v`` (q, k, v f16 [2, M|N, 64], fresh normal;
    ``extra`` the mask's inputs, name -> (array, dtype)) run under each of ``tunings`` (ATTENTION_TUNING; ``expect``
    (source, tuning) must hold of the kernel's source): every run's outputs the same bits as the first's (unless not
    ``same_bits``: then each run matching the reference), and matching the reference. Returns the outputs."""
    import os

    from cuvil_dsl.codegen import cuda_attention
    from cuvil_dsl.reference import execute

    (tmp_path / "m.cuvil").write_text(
        f"pipeline m(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], {signature}) -> o: f16[B, M, D] {{\n"
        f"    o = softmax(where({cond}, (q @ k.T) * {scale}, -30000.0)) @ v\n}}\n")
    (tmp_path / "m.yaml").write_text(
        f"pipeline: m.cuvil\nshapes: {{B: 2, M: {M}, N: {N}, D: 64}}\ncheck: {{rtol: 4.0e-3, atol: 4.0e-3}}\n")
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    fresh = {name: rng.normal(size=(2, n, 64)).astype(np.float16) for name, n in (("q", M), ("k", N), ("v", N))}
    outs = []
    for tuning in tunings:
        monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", dict(tuning))
        case = load_case(tmp_path / "m.yaml")
        prepared = Prepared(case)
        for name, (host, dtype) in [*((n, (h, DType.F16)) for n, h in fresh.items()), *extra.items()]:
            prepared.host[name] = host
            prepared.buffers[name][...] = _device_array(host, dtype)
        assert expect(prepared.launches[-1].kernel.source, tuning), tuning
        prepared.run()
        outs.append(prepared.results()["o"])
        if same_bits:
            np.testing.assert_array_equal(outs[0].view(np.uint16), outs[-1].view(np.uint16),
                                          err_msg=f"{tuning} against {tunings[0]}, inputs of seed {seed}")
    want = execute(case.pipeline, prepared.host, case.binding.params)
    rtol, atol = case.loaded.spec.check.tolerances(DType.F16, False)
    for out in outs if not same_bits else outs[-1:]:
        assert_matches(out, want["o"], DType.F16, rtol, atol)
    return outs


@pytest.mark.parametrize("N, tuning", [
    (7 * 64, {"stages": 3, "groups": 2, "bn": 64, "persistent": False}),  # two rounds of 3 tiles, none left
    (8 * 64 - 5, {"stages": 3, "groups": 2, "bn": 64, "persistent": False}),  # ragged: a tile left after the rounds
    (12 * 64, {"stages": 3, "groups": 2, "bn": 64, "persistent": 2}),  # each work item from slot 0, phase 0
    (1000, {"persistent": 2}),  # 16 tiles of 64 keys, 2 slots, 4 consumers, a ragged last tile
    (1000, {"groups": 2, "bn": 128, "persistent": False}),  # 8 tiles of 128 keys
], ids=str)
def test_unrolled_loop_gives_the_same_bits(N, tuning, tmp_path, monkeypatch):
    """ATTENTION_TUNING "unroll" (the overlapped loop in rounds of one tile a K and V slot, each copy of its body with
    constant slots and the round's barrier phase) and "uniform" (the warpgroup's index from lane 0) change no
    arithmetic: bit for bit the rolled kernel's outputs, on ragged shapes with fresh inputs, rounds with and without
    tiles left after them, persistent grids walking several work items, and matching the reference. (A masked loop,
    unrolled here by True: "auto", the default, unrolls only loops without a pass over the scores' elements.)"""
    M = 333
    qpos = np.arange(M, dtype=np.int32)[:, None] + 40
    kpos = np.arange(N, dtype=np.int32)[None, :].copy()
    extra = {"qpos": (qpos, DType.I32), "kpos": (kpos, DType.I32)}
    tunings = [{**tuning, "skip": False, "unroll": False, "uniform": False}, {**tuning, "skip": False, "unroll": True}]
    _masked_bits(tmp_path, monkeypatch, M, N, "qpos: i32[M, 1], kpos: i32[1, N]", "kpos <= qpos", extra, tunings,
                 lambda source, t: ("cvl_ph" in source) is t["unroll"])


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("scale", ["0.1", "(-0.1)"])
def test_listed_bare_tiles_match_the_reference_at_any_scale(scale, groups, tmp_path, monkeypatch):
    """The list's "bare" tiles fold the where's scale into the exponent where it is not negative (the same bits at a
    power of two: test_listed_key_tiles_give_the_same_bits), and scale each element first where it is (the maximum
    is then a minimum): at 0.1 and -0.1, causal over keys that fill their tiles, the kernel with the list and the one
    without both match the float64 reference on fresh inputs."""
    M, N = 333, 768
    qpos = np.arange(M, dtype=np.int32)[:, None] + 40
    kpos = np.arange(N, dtype=np.int32)[None, :].copy()
    extra = {"qpos": (qpos, DType.I32), "kpos": (kpos, DType.I32)}
    tunings = [{"groups": groups, "skip": False}, {"groups": groups, "skip": "list"}]
    _masked_bits(tmp_path, monkeypatch, M, N, "qpos: i32[M, 1], kpos: i32[1, N]", "kpos <= qpos", extra, tunings,
                 lambda source, t: ("cvl_fold" in source) is (t.get("skip") == "list"), scale=scale, same_bits=False)


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("form", ["causal with holes", "window", "sliding window", "f32 positions", "causal",
                                  "causal, whole tiles", "sliding window, whole tiles"])
def test_listed_key_tiles_give_the_same_bits(form, groups, tmp_path, monkeypatch):
    """ATTENTION_TUNING "skip": "list": each block lists the key tiles some row of it sees unmasked (a mask of
    positions, ``kpos <= qpos`` and the like) and computes those alone; where a skipped tile's numerators would not
    have been 0 (rows masked whole, whose softmax is uniform over the fill), the block runs every tile again. The
    outputs are bit for bit those of the kernel without skipping, and match the reference, on ragged M and N with
    fresh inputs: causal positions with rows masked whole and a block of keys moved past every row (tiles skipped
    in the middle, and the second pass); a window computed in the kernel (tiles skipped before the first computed);
    a causal sliding window (two terms, ``&``); f32 positions in descending order (``>``); plain causal (the first
    pass alone); plain causal over keys that fill their tiles, where a tile every element of which passes is "fold"ed
    (its raw accumulators scaled once: the same bits at this power-of-two scale), and runs of such tiles go in
    rounds (by default, with the "serial" second pass; and the list's loop rolled, "unroll": False); and a wide
    sliding window over such keys (rounds between tiles with the where). The second pass "serial" (each product
    waited for, the default) and overlapped."""
    whole = form.endswith("whole tiles")
    M, N = 333, (768 if whole else 700)
    qpos = np.arange(M, dtype=np.int32)[:, None] + 40
    kpos = np.arange(N, dtype=np.int32)[None, :].copy()
    signature, cond = "qpos: i32[M, 1], kpos: i32[1, N]", "kpos <= qpos"
    if form == "causal with holes":
        qpos[5:10] = -1  # before every key: masked whole
        kpos[0, 256:384] = 10_000  # past every row: hidden from all of them
    elif form == "window":
        cond = "kpos > qpos - 200"
    elif form == "sliding window":
        cond = "(kpos <= qpos) & (kpos > qpos - 200)"
    elif form == "sliding window, whole tiles":
        cond = "(kpos <= qpos) & (kpos > qpos - 600)"
    elif form == "f32 positions":
        signature, cond = "qpos: f32[M, 1], kpos: f32[1, N]", "kpos > qpos"
        qpos, kpos = (N - qpos).astype(np.float32), (N - kpos).astype(np.float32)
    dtype = DType.F32 if form == "f32 positions" else DType.I32
    extra = {"qpos": (qpos, dtype), "kpos": (kpos, dtype)}
    tunings = [{"groups": groups, "skip": False}, {"groups": groups, "skip": "list"}]
    if whole:
        tunings.append({"groups": groups, "skip": "list", "unroll": False})
    if form == "causal with holes":  # the second pass's products overlapped as the first's (serial by default)
        tunings.append({"groups": groups, "skip": "list", "again": "overlap"})
    _masked_bits(tmp_path, monkeypatch, M, N, signature, cond, extra, tunings,
                 lambda source, t: ("cvl_tiles" in source) is (t.get("skip") == "list")
                 and ("cvl_round" in source) is (whole and t.get("skip") == "list" and t.get("unroll", "auto") is not False))
