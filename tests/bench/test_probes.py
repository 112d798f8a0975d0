"""The session-13 probes without a GPU: benchmarks/flush_probe.py's replica kernels build for sm_90 (NVRTC
needs no GPU), and it, benchmarks/placement_probe.py and benchmarks/graph_probe.py (session 17) say they have no
GPU to run on with exit status 2 (as does benchmarks/ncu_gemm.py, session 23);
benchmarks/shapes/ holds specs that check, each matched to its benchmark's baselines."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import ROOT, build_for_sm_90, exits_2_without_gpu, load_script

from cuvil_dsl.bench.baselines import kind_of


def test_flush_probe_replicas_build_for_sm_90(tmp_path):
    probe, stream = load_script("flush_probe"), load_script("ab_stream")
    build_for_sm_90(stream.SOURCE + probe.STREAM_SOURCE, probe.STREAM_KERNELS, tmp_path, ("-std=c++17",))


def test_graph_probe_kernels_build_for_sm_90(tmp_path):
    probe, stream = load_script("graph_probe"), load_script("ab_stream")
    build_for_sm_90(stream.SOURCE + probe.EMPTY, ("vec2", "empty_kernel"), tmp_path, ("-std=c++17",))


def test_flush_probe_needs_specs_or_stream(capsys):
    with pytest.raises(SystemExit):
        load_script("flush_probe").main([])
    assert "name one or more specs, or --stream" in capsys.readouterr().err


@pytest.mark.parametrize("stem, argv", [("flush_probe", ["--stream"]), ("placement_probe", []), ("graph_probe", []),
                                        ("ncu_gemm", []), ("ncu_gemm", ["attention"]), ("skip_probe", []),
                                        ("flush_probe", ["--tlb", "benchmarks/attention_f16.yaml"])])
def test_probes_exit_2_without_gpu(stem, argv, capsys):
    exits_2_without_gpu(load_script(stem), stem, capsys, argv)


SHAPES = sorted((ROOT / "benchmarks" / "shapes").glob("*.yaml"))


@pytest.mark.parametrize("spec", SHAPES, ids=lambda p: p.stem)
def test_shape_variants_check_and_keep_their_baselines(spec: Path):
    from cuvil_dsl.cli import main

    assert main(["check", str(spec)]) == 0
    assert kind_of(spec.stem) is not None


@pytest.mark.parametrize("sizes, points", [((1024, 1024, 8192), (0, 1, 2, 3, 4)),  # 4 parts: clusters of 2, a ticket
                                          ((4096, 4096, 4096), (0, 1, 4))])  # one CTA a tile, no split
def test_gemm_timeline_notes_each_phase_and_compiles(sizes, points, monkeypatch, tmp_path):
    """ab_wgmma's timeline probe: the library kernel itself, with thread 0 noting %globaltimer at each phase it has
    (every CTA that leaves after its ticket flushes its notes first), built for sm_90a by NVRTC."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    ab = load_script("ab_wgmma")
    monkeypatch.setattr(ab, "TIMED", [sizes])
    monkeypatch.setattr(ab, "LIBRARY_CHECKS", [])
    (((_, label), (k, unit)),) = ab.build_library([m for m in ab.LIBRARY_MODES if m[0] == ab.TIMELINE]).items()
    assert unit.resources[k.entry].spill_bytes == 0
    for i in range(5):
        assert (f"CVL_NOTE({i});" in k.source) == (i in points), i
    assert k.source.count("CVL_FLUSH();") == (2 if 3 in points else 1)  # at the exit, and before a ticket's return
    assert ("{ CVL_FLUSH(); return; }" in k.source) == (3 in points)
