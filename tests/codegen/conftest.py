"""Rendered and compiled kernels of every codegen case, built once per session and shared."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from codegen_cases import case_paths, load_case

from cuvil_dsl.codegen import RenderedKernel, render_cuda
from cuvil_dsl.compile import CompiledUnit, CompileUnit, compile_units


@dataclass(frozen=True)
class Built:
    case: str  # the case's yaml stem
    kernel: RenderedKernel
    unit: CompiledUnit


def build(arch: str) -> dict[tuple[str, str], Built]:
    """Every kernel of every case for ``arch``, compiled in one parallel batch."""
    rendered = []
    for path in case_paths():
        case = load_case(path)
        for k in render_cuda(case.plan(arch), case.binding.sizes, arch, tf32=case.tf32):
            rendered.append((f"{path.parent.name}/{path.stem}", k))
    units = compile_units(
        [CompileUnit(f"{k.entry}_{i}", k.source, (k.entry,), k.options) for i, (_c, k) in enumerate(rendered)], arch)
    return {(case, k.name): Built(case, k, u) for (case, k), u in zip(rendered, units)}


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """``built(arch)`` -> {(case id, kernel name): Built}, compiled on first use."""
    cache = tmp_path_factory.mktemp("codegen-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("CUVIL_CACHE_DIR", str(cache))
    done: dict[str, dict] = {}

    def get(arch: str) -> dict[tuple[str, str], Built]:
        if arch not in done:
            done[arch] = build(arch)
        return done[arch]

    yield get
    mp.undo()
