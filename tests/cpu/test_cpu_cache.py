"""numba's cache across processes: the generated module is a real file, found again by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cuvil_dsl.codegen.cpu import render_cpu
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes.fusion import plan_pipeline
from cuvil_dsl.runtime.cpu_modules import load_module

SOURCE = "pipeline cached(x: f32[R, C]) -> y: f32[R, C] { y = softmax(x * 3) }"
SIZES = {"R": 5, "C": 12}
SCRIPT = f"""
import json
import numpy as np
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes.fusion import plan_pipeline
from cuvil_dsl.runtime.base import Target
from cuvil_dsl.runtime.cpu_executor import CpuExecutor
pipeline = check_source({SOURCE!r}).module.pipelines[0]
executor = CpuExecutor.build(pipeline, plan_pipeline(pipeline)[0], {SIZES!r}, Target("cpu"))
y = executor.run({{"x": np.arange(60, dtype=np.float32).reshape(5, 12) / 10}}, {{}})["y"]
print(json.dumps({{"hits": [k.cache_hit for k in executor.kernel_reports()], "y": y.tolist()}}))
"""


def _run_fresh_process(cache: Path) -> dict:
    env = {**os.environ, "CUVIL_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_second_process_loads_the_kernel_from_numbas_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _run_fresh_process(cache)
    (module_file,) = (cache / "numba").glob("*.py")
    stamp = module_file.stat().st_mtime_ns
    second = _run_fresh_process(cache)
    assert first["hits"] == [False] and second["hits"] == [True]
    # bit for bit: the fresh compile runs LLVM's first copy of the parallel loop, the cached
    # one its second; strict IEEE arithmetic makes them agree
    assert first["y"] == second["y"]
    assert module_file.stat().st_mtime_ns == stamp  # an intact module file is never rewritten
    assert list((cache / "numba" / "__pycache__").glob(f"{module_file.stem}.*.nbi"))


def test_a_damaged_module_file_is_rewritten_before_it_is_imported(tmp_path):
    checked = check_source("pipeline planted(x: f32[N]) -> y: f32[N] { y = x * 4 }")  # not imported before
    (module,) = render_cpu(plan_pipeline(checked.module.pipelines[0])[0], {"N": 8})
    first = load_module(module, tmp_path)
    first.path.write_text("import os  # planted\n" + module.source)
    sys.modules.pop(first.entry.py_func.__module__)  # as in a new process
    again = load_module(module, tmp_path)
    assert again.path == first.path and again.path.read_text() == module.source
    assert sys.modules[again.entry.py_func.__module__].__file__ == str(again.path)
