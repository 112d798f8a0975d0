"""The import direction of STYLE.md: each stage imports only from the stages before it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cuvil_dsl"

# Lower rank may not import higher rank. Modules at the package root not listed are free.
RANK = {
    "diagnostics": 0, "knobs": 0, "types": 0,
    "frontend": 1, "ir": 1,
    "passes": 2, "reference": 2,
    "codegen": 3, "spec": 3,
    "compile": 4,
    "runtime": 5,
}


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cuvil_dsl."):
            yield node.module.split(".")[1], node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cuvil_dsl."):
                    yield alias.name.split(".")[1], node.lineno


def test_stages_import_only_earlier_stages():
    problems = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        stage = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if stage not in RANK:
            continue
        for target, line in _imports(path):
            if target in RANK and RANK[target] > RANK[stage]:
                problems.append(f"{rel}:{line} imports cuvil_dsl.{target}")
    assert not problems, "\n".join(problems)
