"""benchmarks/ab_stream.py without a GPU: its kernels build for sm_90 (NVRTC needs no GPU), each bulk
variant's stages fit the shared memory it asks of its blocks, the chunks divide the stream, and the
script says it has no GPU to run on with exit status 2."""

from __future__ import annotations

from bench_support import build_for_sm_90, exits_2_without_gpu, load_script


def test_kernels_build_for_sm_90(tmp_path):
    s = load_script("ab_stream")
    names = ("vec2", "vec2_ld_ef", "vec2_st_ef", "vec2_ldst_ef", "vec4_256", *s.BULK)
    unit = build_for_sm_90(s.SOURCE, names, tmp_path)
    assert all(unit.resources[n].spill_bytes == 0 for n in names)


def test_bulk_variants_fit_and_divide_the_stream():
    s = load_script("ab_stream")
    for name, (chunk, stages, per_sm) in s.BULK.items():
        assert chunk * stages * per_sm <= 227 * 1024, name  # the blocks asked of a multiprocessor fit
        assert (s.N * 4) % chunk == 0 and chunk % (16 * 256) == 0, name  # whole chunks; whole vectors a thread
        assert f"bulk<{chunk}, {stages}, {'true' if 'ldst' in name else 'false'}>" in s.SOURCE


def test_without_a_gpu_it_exits_2(capsys):
    exits_2_without_gpu(load_script("ab_stream"), "ab_stream", capsys)
