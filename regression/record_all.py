"""Re-record the regression cases: one per example spec in ``specs/*.yaml``, for one backend.

    python regression/record_all.py --backend cpu               # every spec -> regression/cpu/<name>/
    python regression/record_all.py --backend reference softmax  # only specs/softmax.yaml
    python regression/record_all.py --backend cuda --dest "$OUT/cuda"  # on the GPU machine

The example specs are sized for a GPU. A case keeps a smaller instance of each, so the repository
stays small and ``pytest regression`` fast: the largest size the spec's ``shapes`` sets is halved,
again and again, until the case's inputs and results fit in ``--max-bytes`` (sizes bound by
``.npy`` files or by literal dimensions keep their value). The sizes used are in each case's
manifest (``spec.shapes_override``) and its spec copy. Existing cases are replaced. Exit status 1
when any spec could not be recorded.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from cuvil_dsl import driver
from cuvil_dsl.diagnostics import UserError, render
from cuvil_dsl.spec import bind, load_spec
from cuvil_dsl.testing.record import RecordRefused, record_case
from cuvil_dsl.types import concrete_shape

ROOT = Path(__file__).resolve().parents[1]
MIN_SIZE = 16


def fit_shapes(spec: Path, max_bytes: int) -> tuple[dict[str, int], int]:
    """Sizes to override so the pipeline's inputs and results take at most ``max_bytes`` (or as
    close as halving the spec's own sizes down to ``MIN_SIZE`` gets), and the bytes they take."""
    loaded = load_spec(spec)
    pipeline, _ = driver.load_pipeline(loaded)
    original = bind(loaded, pipeline).sizes
    fixed = {c.symbol for c in pipeline.constraints}
    free = [s for s in loaded.spec.shapes if s not in fixed]
    arrays = [p.type for p in pipeline.tensor_params] + [r.type for r in pipeline.results]
    sizes = dict(original)

    def total() -> int:
        return sum(math.prod(concrete_shape(t.shape, sizes)) * t.dtype.itemsize for t in arrays)

    while total() > max_bytes:
        shrinkable = [s for s in free if sizes[s] > MIN_SIZE]
        if not shrinkable:
            break
        largest = max(shrinkable, key=lambda s: sizes[s])
        sizes[largest] = max(MIN_SIZE, sizes[largest] // 2)
    return {s: sizes[s] for s in free if sizes[s] != original[s]}, total()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", required=True, choices=("cpu", "reference", "cuda"))
    parser.add_argument("--max-bytes", type=int, default=256 * 1024,
                        help="inputs and results of one case, at most (default 256 KiB)")
    parser.add_argument("--dest", type=Path, default=None,
                        help="folder to write the cases in (default regression/<backend>); on the GPU machine, "
                             "a folder under $OUT, whose cases are then copied into regression/cuda")
    parser.add_argument("names", nargs="*", help="spec names (file stems); default: every specs/*.yaml")
    args = parser.parse_args(argv)
    specs = sorted((ROOT / "specs").glob("*.yaml"))
    if args.names:
        specs = [s for s in specs if s.stem in args.names]
    failed = []
    for spec in specs:
        out = (args.dest or ROOT / "regression" / args.backend) / spec.stem
        try:
            shapes, nbytes = fit_shapes(spec, args.max_bytes)
            provenance = {"recorded_from": spec.relative_to(ROOT).as_posix(), "shapes_override": shapes}
            recording = record_case(spec, out, backend=args.backend, force=True, shapes=shapes, provenance=provenance)
        except UserError as exc:
            failed.append(spec.stem)
            print("\n".join(render(d) for d in exc.diagnostics), file=sys.stderr)
            continue
        except RecordRefused as exc:
            failed.append(spec.stem)
            print(f"{spec.stem}: not recorded: {exc}", file=sys.stderr)
            continue
        size = folder_bytes(out)
        note = "  (over 2 MB)" if size > 2_000_000 else ""
        print(f"{recording.describe()}; sizes {shapes or 'as in the spec'}, case {size / 1024:.0f} KiB{note}")
        for warning in recording.warnings:
            print(f"  warning: {warning}")
    if failed:
        print(f"not recorded: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
