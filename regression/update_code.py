#!/usr/bin/env python3
"""Re-record the cases whose generated code changed, and nothing else, after an intended codegen change.

    python3 regression/update_code.py [--backend cuda] [--layout] [--cases DIR] [--dest DIR] [--archive FILE.tar.gz]

Replays every case of the backend (``cuvil-dsl replay``). A case whose only failed check is ``code``
(results, snapshot, guards and the rest still as recorded) is re-recorded in place
(``replay --update``) and its folder copied under ``--dest`` when given (the GPU machine's $OUT, so the
session brings it back), or into one ``--archive`` (the device tool does not bring back folders that
deep: ``--archive $OUT/rerecorded.tar.gz``, then ``tar xzf`` it in ``regression/``). A case with any other failure is left alone and reported. Exit status 0 when
no case failed otherwise, 1 when one did.

``--layout`` (after a fusion change, which adds or removes intermediate buffers and so moves the arena) also
accepts a failed ``snapshot`` check next to ``code``, provided the re-recorded snapshot's inputs and results
are the recorded ones (name, dtype, shape, bytes and digest; ``checks.check_snapshot`` across layouts): the
case is re-recorded, compared, and put back as it was when they differ.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def replay(case: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuvil_dsl", "replay", str(case), *extra],
                          cwd=ROOT, capture_output=True, text=True)


def same_inputs_and_results(before: Path, after: Path, exact: bool) -> str | None:
    """None when the case ``after`` (re-recorded) holds the inputs and results of ``before`` (bit for bit
    under the exact rule; under the tolerance rule, a replay on another toolchain, the results check
    already held them within the spec's tolerance and only the layout is compared), else why not (a case
    without a snapshot compares nothing)."""
    from cuvil_dsl.testing.case import load_case
    from cuvil_dsl.testing.checks import check_snapshot

    old, new = load_case(before).snapshot(), load_case(after).snapshot()
    if old is None and new is None:
        return None
    check = check_snapshot(old, new, exact=exact, same_target=False)
    return None if check.passed else f"the re-recording changed an input or result: {check.message}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--dest", type=Path, help="copy each re-recorded case here (as BACKEND/CASE)")
    ap.add_argument("--archive", type=Path, help="also write the re-recorded cases to this .tar.gz (as BACKEND/CASE)")
    ap.add_argument("--layout", action="store_true",
                    help="also accept a changed memory layout when every input and result is the same bits")
    ap.add_argument("--cases", type=Path, help="the folder of case folders (default: regression/BACKEND)")
    args = ap.parse_args(argv)
    cases = args.cases or ROOT / "regression" / args.backend
    allowed = [{"code"}, {"code", "snapshot"}] if args.layout else [{"code"}]
    updated, failed = [], []
    for case in sorted(p for p in cases.iterdir() if (p / "case.yaml").is_file()):
        done = replay(case, "--json")
        try:
            report = json.loads(done.stdout)
        except json.JSONDecodeError:
            failed.append(f"{case.name}: no report ({done.stderr.strip()[-300:]})")
            continue
        bad = {c["name"] for c in report["checks"] if c.get("passed") is False}
        rules = {c["name"]: c.get("rule") for c in report["checks"]}
        if not bad:
            continue
        if bad not in allowed:
            failed.append(f"{case.name}: {', '.join(sorted(bad))}")
            continue
        with tempfile.TemporaryDirectory() as keep:
            kept = Path(keep) / case.name
            shutil.copytree(case, kept)
            again = replay(case, "--update")
            why = (f"re-recording failed ({again.stderr.strip()[-300:]})" if again.returncode
                   else same_inputs_and_results(kept, case, rules.get("snapshot") == "exact"))
            if why:
                shutil.rmtree(case)
                shutil.copytree(kept, case)
                failed.append(f"{case.name}: {why}")
                continue
        updated.append(case.name)
        if args.dest:
            shutil.copytree(case, args.dest / args.backend / case.name, dirs_exist_ok=True)
    if args.archive and updated:
        import tarfile

        with tarfile.open(args.archive, "w:gz") as tar:
            for name in updated:
                tar.add(cases / name, arcname=f"{args.backend}/{name}")
    print(f"re-recorded ({'code and layout' if args.layout else 'code only'}): {', '.join(updated) or 'none'}")
    for line in failed:
        print(f"FAILED {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
