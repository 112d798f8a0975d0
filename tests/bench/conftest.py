"""Fixtures for the bench tests (the helpers they use are in bench_support)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import SMALL_SHAPES, copy_benchmarks


@pytest.fixture(scope="session")
def small_benchmarks(tmp_path_factory) -> Path:
    return copy_benchmarks(tmp_path_factory.mktemp("benchmarks"), SMALL_SHAPES)
