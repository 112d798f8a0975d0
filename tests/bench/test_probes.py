"""The session-13 probes without a GPU: benchmarks/flush_probe.py's replica kernels build for sm_90 (NVRTC
needs no GPU), and it and benchmarks/placement_probe.py say they have no GPU to run on with exit status 2;
benchmarks/shapes/ holds specs that check, each matched to its benchmark's baselines."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import ROOT, build_for_sm_90, exits_2_without_gpu, load_script

from cuvil_dsl.bench.baselines import kind_of


def test_flush_probe_replicas_build_for_sm_90(tmp_path):
    probe, stream = load_script("flush_probe"), load_script("ab_stream")
    build_for_sm_90(stream.SOURCE + probe.STREAM_SOURCE, probe.STREAM_KERNELS, tmp_path, ("-std=c++17",))


def test_flush_probe_needs_specs_or_stream(capsys):
    with pytest.raises(SystemExit):
        load_script("flush_probe").main([])
    assert "name one or more specs, or --stream" in capsys.readouterr().err


@pytest.mark.parametrize("stem, argv", [("flush_probe", ["--stream"]), ("placement_probe", [])])
def test_probes_exit_2_without_gpu(stem, argv, capsys):
    exits_2_without_gpu(load_script(stem), stem, capsys, argv)


SHAPES = sorted((ROOT / "benchmarks" / "shapes").glob("*.yaml"))


@pytest.mark.parametrize("spec", SHAPES, ids=lambda p: p.stem)
def test_shape_variants_check_and_keep_their_baselines(spec: Path):
    from cuvil_dsl.cli import main

    assert main(["check", str(spec)]) == 0
    assert kind_of(spec.stem) is not None
