"""Coverage-guided fuzzing of the command line with atheris (libFuzzer for Python).

The hypothesis fuzzers in test_hardening_fuzz.py generate near-valid inputs from the grammar
and the schema; atheris complements them by mutating bytes towards new coverage of the
front end, the spec loader and the .npy reader. Not part of the default test run:

    python tests/hardening/fuzz_atheris.py seeds /tmp/cuvil-seeds      # the corpus, as atheris inputs
    python tests/hardening/fuzz_atheris.py -max_total_time=600 /tmp/cuvil-atheris /tmp/cuvil-seeds

(the first folder receives new interesting inputs, the others seed it), or
``CUVIL_FUZZ=1 pytest tests/hardening -k atheris`` for a short run. The first input byte picks the
target: a .cuvil program, a spec (YAML) next to a valid program, or a .npy file named by a spec.
A crash is exit status 3, a traceback, or an exception escaping ``main``: atheris then
stops and writes the input to ``crash-*``; reproduce it with the same command and that file.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["cuvil_dsl"]):
    # cli imports most stages lazily: import them here, or they would run uninstrumented
    import cuvil_dsl.driver  # noqa: F401 - frontend, ir, spec, reference, runtime base
    import cuvil_dsl.passes  # noqa: F401
    import cuvil_dsl.spec.inputs  # noqa: F401
    from cuvil_dsl.cli import main

CORPUS = Path(__file__).resolve().parent / "corpus"

WORK = Path(tempfile.mkdtemp(prefix="cuvil-atheris-"))
PROGRAM = """\
pipeline p(x: f32[N, N], v: f32[N], alpha: f32 = 0.5) -> y: f32[N, N] {
    graph g0 {
        kernel k0 {
            y = softmax(x * alpha + v, axis=-1)
        }
    }
}
"""
NPY_SPEC = "pipeline: prog.cuvil\ninputs:\n  x: {file: x.npy}\nrun: {warmup: 0, iterations: 1}\n"


def _call(args: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    text = err.getvalue()
    if rc not in (0, 1, 2) or "Traceback (most recent call last)" in text or "internal error" in text:
        raise RuntimeError(f"cuvil-dsl {' '.join(args)} -> {rc}\n{text[-4000:]}")


def one_input(data: bytes) -> None:
    if not data:
        return
    target, body = data[0] % 3, data[1:]
    (WORK / "prog.cuvil").write_text(PROGRAM)
    if target == 0:
        path = WORK / "fuzz.cuvil"
        path.write_bytes(body)
        _call(["check", str(path), "--format", "json"])
        _call(["check", str(path)])
        return
    spec = WORK / "spec.yaml"
    if target == 1:
        spec.write_bytes(body)
    else:
        spec.write_text(NPY_SPEC)
        (WORK / "x.npy").write_bytes(body)
    _call(["check", str(spec), "--format", "json"])
    _call(["run", str(spec), "--backend", "reference", "--json", "--iterations", "1"])


def write_seeds(folder: Path) -> None:
    """The regression corpus as atheris inputs (target byte first), to start from real cases."""
    folder.mkdir(parents=True, exist_ok=True)
    for prog in sorted((CORPUS / "programs").glob("*.cuvil")):
        (folder / f"p_{prog.stem}").write_bytes(b"\x00" + prog.read_bytes()[:20_000])
    for case in sorted(p for p in (CORPUS / "specs").iterdir() if p.is_dir()):
        (folder / f"s_{case.name}").write_bytes(b"\x01" + (case / "spec.yaml").read_bytes()[:20_000])
        if (case / "x.npy").exists():
            (folder / f"n_{case.name}").write_bytes(b"\x02" + (case / "x.npy").read_bytes()[:20_000])


if __name__ == "__main__":
    if sys.argv[1:2] == ["seeds"]:  # python fuzz_atheris.py seeds DIR
        write_seeds(Path(sys.argv[2]))
        raise SystemExit(0)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
