"""Fixtures of the runtime's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cuda_h() -> str:
    """The text of the NVIDIA wheel's ``cuda.h`` (present without a GPU), which ctypes bindings are
    checked against; the test is skipped where the header is not installed."""
    from cuvil_dsl.compile.nvrtc import header_dir

    include = header_dir()
    if include is None or not (Path(include) / "cuda.h").is_file():
        pytest.skip("cuda.h is not installed (nvidia-cuda-runtime wheel)")
    return (Path(include) / "cuda.h").read_text()
