"""The command line (LANGUAGE.md section 8). Thin: every command calls the library.

Exit status: ``check`` 0 clean or warnings, 1 errors (or warnings with --werror), 2 an
unusable invocation. ``run``/``compile``/...: 0 success, 2 anything found before executing,
1 anything found by executing, 3 an internal error (a message that asks for a report).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path

from cuvil_dsl import __version__, knobs
from cuvil_dsl.diagnostics import (
    CuvilError,
    Diagnostic,
    InternalError,
    RunFailure,
    Span,
    UserError,
    error,
    render,
    to_json,
    to_sarif,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


def _color(stream) -> bool:
    return hasattr(stream, "isatty") and stream.isatty() and "NO_COLOR" not in os.environ


def print_diagnostics(diags, stream=None) -> None:
    stream = stream or sys.stderr
    for d in diags:
        print(render(d, color=_color(stream)), file=stream)


# ---------------------------------------------------------------------------- check
def _check_path(path: str) -> tuple[list[Diagnostic], bool]:
    """Diagnostics for one path, and whether the path itself was usable."""
    p = Path(path)
    try:
        found = p.exists()
    except (OSError, ValueError) as exc:  # a name too long for the file system, a NUL byte
        return [error("E505", f"cannot use {path[:80]!r}: {getattr(exc, 'strerror', None) or exc}",
                      Span.whole_file(path))], False
    if not found:
        return [error("E505", f"no such file: {path}", Span.whole_file(path))], False
    if p.suffix == ".cuvil":
        return _check_program(p), True
    if p.suffix in (".yaml", ".yml"):
        return _check_spec(path), True
    return [error("E505", f"not a .cuvil or spec (.yaml) file: {path}", Span.whole_file(path))], False


def _check_program(path: Path) -> list[Diagnostic]:
    """Checker diagnostics, then kernel-block fusibility (E401), which needs the planner."""
    from cuvil_dsl import frontend
    from cuvil_dsl.passes import plan_pipeline

    checked = frontend.check_file(path)
    diags = list(checked.diagnostics)
    if checked.ok:
        for pipeline in checked.module.pipelines:
            diags += plan_pipeline(pipeline)[1]
    return diags


def _check_spec(path: str) -> list[Diagnostic]:
    from cuvil_dsl import driver, frontend
    from cuvil_dsl.spec import bind, check_kernel_names, load_spec, select_pipeline

    try:
        loaded = load_spec(path)
    except UserError as exc:
        return list(exc.diagnostics)
    checked = frontend.check_file(loaded.pipeline_path)
    diags = list(checked.diagnostics)
    if not checked.ok:
        return diags
    try:
        pipeline = select_pipeline(loaded, checked.module)
        bind(loaded, pipeline)
        from cuvil_dsl.passes import plan_pipeline

        plan, plan_diags = plan_pipeline(pipeline, driver.kernel_overrides(loaded), loaded.spec.target.arch
                                         if loaded.spec.target.arch != "auto" else "sm_90")
        diags += list(plan_diags) + check_kernel_names(loaded, [k.name for k in plan.kernels])
    except UserError as exc:
        diags += list(exc.diagnostics)
    return diags


def cmd_check(args) -> int:
    all_diags: list[Diagnostic] = []
    worst = EXIT_OK
    for path in args.paths:
        diags, usable = _check_path(path)
        all_diags += diags
        if not usable:
            worst = EXIT_USAGE
    all_diags = sorted(dict.fromkeys(all_diags), key=Diagnostic.sort_key)
    if args.format == "json":
        print(to_json(all_diags))
    elif args.format == "sarif":
        print(to_sarif(all_diags))
    else:
        print_diagnostics(all_diags, sys.stdout)
        errors = sum(d.is_error for d in all_diags)
        warnings = len(all_diags) - errors
        if all_diags:
            print(f"{errors} error(s), {warnings} warning(s)", file=sys.stderr)
    if worst == EXIT_USAGE:
        return worst
    if any(d.is_error for d in all_diags) or (args.werror and all_diags):
        return EXIT_FAILED
    return EXIT_OK


# ---------------------------------------------------------------------------- run
def _run_json_failure(args, diags, backend="unknown") -> None:
    if getattr(args, "json", False):
        print(json.dumps({
            "pipeline": None, "backend": backend, "outputs": {},
            "check": {"passed": None, "results": {}},
            "timing": {"p50_us": None, "p99_us": None, "mean_us": None, "std_us": None, "iterations": 0},
            "budget": {"passed": None}, "kernels": [], "diagnostics": [d.to_json() for d in diags],
        }, indent=2))


def cmd_run(args) -> int:
    from cuvil_dsl import driver
    from cuvil_dsl.report import format_run

    if args.sanitize:
        from cuvil_dsl.runtime.sanitize import rerun_under_sanitizer

        rc, text = rerun_under_sanitizer(sys.argv[1:], args.sanitize)
        print(text, file=sys.stderr)
        return rc
    try:
        session = driver.open_spec(args.spec, backend=args.backend, arch=args.arch)
    except UserError as exc:
        print_diagnostics(exc.diagnostics)
        _run_json_failure(args, exc.diagnostics, args.backend or "unknown")
        return EXIT_USAGE
    if args.backend is None and session.spec.target.backend == "auto" and not args.json:
        why = "a GPU is present" if session.target.backend == "cuda" else "no GPU found"
        print(f"backend: {session.target.backend} (auto: {why})", file=sys.stderr)
    print_diagnostics(session.warnings)
    try:
        report = driver.execute(session, iterations=args.iterations)
    except UserError as exc:
        print_diagnostics(exc.diagnostics)
        _run_json_failure(args, exc.diagnostics, session.target.backend)
        return EXIT_USAGE
    unsaved = None
    if args.save_outputs and report.outputs:
        try:
            driver.save_outputs(report.outputs, args.save_outputs)
        except OSError as exc:  # not a folder, not writable, a name too long: the run itself stands
            unsaved = f"error: cannot save outputs to {args.save_outputs}: {exc.strerror or exc}"
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        if report.failure:
            print(report.failure, file=sys.stderr)
    else:
        print(format_run(report))
    if unsaved:
        print(unsaved, file=sys.stderr)
        return max(report.exit_code, EXIT_USAGE)
    return report.exit_code


# ---------------------------------------------------------------------------- compile
def cmd_compile(args) -> int:
    from cuvil_dsl.stages import compile_spec

    emit = [s.strip() for s in args.emit.split(",") if s.strip()]
    try:
        written = compile_spec(args.spec, emit=emit, out=args.out, arch=args.arch, dump_ir=args.dump_ir,
                               stdout=sys.stdout)
    except UserError as exc:
        print_diagnostics(exc.diagnostics)
        return EXIT_USAGE
    except OSError as exc:  # --out / --dump-ir unwritable, or a file name too long for the file system
        print(f"error: cannot write {exc.filename or args.out or args.dump_ir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return EXIT_OK


# ---------------------------------------------------------------------------- record, replay
def cmd_record(args) -> int:
    from cuvil_dsl.report import format_run
    from cuvil_dsl.testing.case import CaseError
    from cuvil_dsl.testing.record import RecordRefused, parse_shape, record_case

    def fail(message: str, run: dict | None = None) -> None:
        print(f"error: {message}", file=sys.stderr)
        if args.json:
            print(json.dumps({"case": None, "run": run, "error": message}, indent=2))

    try:
        shapes = dict(parse_shape(text) for text in args.shape or [])
    except ValueError as exc:
        fail(f"argument --shape: {exc}")
        return EXIT_USAGE
    try:
        recording = record_case(args.spec, args.out, backend=args.backend, iterations=args.iterations,
                                arch=args.arch, force=args.force, shapes=shapes)
    except UserError as exc:
        print_diagnostics(exc.diagnostics)
        fail(f"{args.spec}: not recorded ({len(exc.diagnostics)} problem(s) above)")
        return EXIT_USAGE
    except CaseError as exc:
        fail(str(exc))
        return EXIT_USAGE
    except RecordRefused as exc:
        print(format_run(exc.report), file=sys.stderr)
        fail(f"not recorded: {exc}", exc.report.to_json())
        return EXIT_FAILED
    for warning in recording.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(recording.to_json(), indent=2))
    else:
        print(recording.describe())
    return EXIT_OK


def cmd_replay(args) -> int:
    from cuvil_dsl.testing.case import CaseError
    from cuvil_dsl.testing.html import write_html
    from cuvil_dsl.testing.record import RecordRefused
    from cuvil_dsl.testing.replay import ReplayReport, format_replay, replay_case, update_case

    try:
        report = replay_case(args.case, backend=args.backend, arch=args.arch)
    except (CaseError, UserError) as exc:
        if isinstance(exc, UserError):
            print_diagnostics(exc.diagnostics)
        message = str(exc) if isinstance(exc, CaseError) else "the case's spec cannot be run here (problems above)"
        report = ReplayReport(args.case, args.backend or "unknown", unusable=message)
    if args.html:
        write_html([report], args.html)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(format_replay(report), file=sys.stderr if report.unusable else sys.stdout)
    if not args.update:
        return report.exit_code
    try:
        recording = update_case(args.case, backend=args.backend, arch=args.arch)
    except UserError as exc:
        print_diagnostics(exc.diagnostics)
        return EXIT_USAGE
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RecordRefused as exc:
        print(f"error: not re-recorded: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(recording.describe("re-recorded"), file=sys.stderr)
    return EXIT_OK


# ---------------------------------------------------------------------------- bench
def cmd_bench(args) -> int:
    """Benchmark specs side by side with the baselines and the roofline (cuvil_dsl/bench)."""
    import importlib.util

    from cuvil_dsl.bench import report, saved

    def unusable(message: str, diags=()) -> int:
        if message:
            print(f"error: {message}", file=sys.stderr)
        print_diagnostics(diags)
        if args.json:
            print(json.dumps({"error": message or "the specs cannot be benchmarked (diagnostics)",
                              "diagnostics": [d.to_json() for d in diags], "benchmarks": [],
                              "exit_code": EXIT_USAGE}, indent=2))
        return EXIT_USAGE

    if args.plot and importlib.util.find_spec("matplotlib") is None:
        return unusable("--plot needs matplotlib (pip install matplotlib, or the dev extra)")
    if args.fail_slower is not None and not args.compare:
        return unusable("--fail-slower needs --compare BASE.json: the run it is measured against")
    try:  # the saved documents first: a bad one stops the command before anything runs
        base = saved.load(args.compare) if args.compare else None
        if args.from_runs:
            if args.specs:
                return unusable("give SPEC files to run, or --from saved runs to report, not both")
            given = [name for name, value in (("--backend", args.backend), ("--baselines", args.baselines),
                                              ("--quick", args.quick), ("--rounds", args.rounds)) if value]
            if given:
                return unusable(f"{', '.join(given)}: options of a run; --from reports runs already made")
            doc = saved.merge([saved.load(path) for path in args.from_runs], names=args.from_runs)
            worst = int(doc.get("exit_code") or 0)
        elif not args.specs:
            return unusable("give at least one SPEC to benchmark, or --from a saved run (bench --json)")
    except saved.SavedError as exc:
        return unusable(str(exc))
    if not args.from_runs:
        doc, worst = _bench_run(args, unusable)
        if doc is None:
            return worst
    if base is not None:
        doc["comparison"] = saved.compare(doc, base, args.fail_slower, base_name=args.compare)
        if doc["comparison"]["failed"]:
            print(f"error: slower than {args.compare} by more than {args.fail_slower:g}%: "
                  f"{', '.join(doc['comparison']['failed'])}", file=sys.stderr)
            worst = max(worst, EXIT_FAILED)
        doc["exit_code"] = worst
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(report.format_table(doc), end="")
        if base is not None:
            print(saved.format_comparison(doc["comparison"]), end="")
    if args.plot:
        report.plot(doc, args.plot)
        print(f"bench: wrote {args.plot}", file=sys.stderr, flush=True)
    return worst


def _bench_run(args, unusable) -> tuple[dict | None, int]:
    """Run ``args.specs`` and return the bench document and the exit status; ``(None, status)`` when
    nothing could run."""
    from cuvil_dsl import driver
    from cuvil_dsl.bench import baselines, report
    from cuvil_dsl.bench.runner import Bench
    from cuvil_dsl.bench.timing import Settings

    try:
        # one backend for every spec: the ceilings are its device's
        backend = driver.resolve_backend(args.backend or "auto")
    except UserError as exc:
        return None, unusable("", exc.diagnostics)
    try:
        families = baselines.select(args.baselines or "auto", backend)
    except ValueError as exc:
        return None, unusable(f"argument --baselines: {exc}")
    sessions, diags = [], []
    for spec in args.specs:  # everything that can fail before executing, for every spec, first
        try:
            sessions.append(driver.open_spec(spec, backend=backend))
        except UserError as exc:
            diags += exc.diagnostics
    if diags:
        return None, unusable("", diags)

    def progress(text: str) -> None:
        print(f"bench: {text}", file=sys.stderr, flush=True)

    settings = Settings.quick() if args.quick else Settings()
    if args.rounds is not None:
        settings = dataclasses.replace(settings, rounds=args.rounds)
    bench = Bench(backend, settings, families, log=progress)
    try:
        progress(f"measuring the ceilings ({backend})")
        bench.measure_ceilings(quick=args.quick)
    except Exception as exc:  # a report without floors beats no report
        progress(f"ceilings not measured: {type(exc).__name__}: {exc}")
    results, skipped, worst = [], [], EXIT_OK
    for session in sessions:
        try:
            result = bench.run(session)
        except UserError as exc:  # a compile failure: found before executing this spec
            print_diagnostics(exc.diagnostics)
            skipped.append({"name": Path(session.loaded.file).stem, "spec": session.loaded.file,
                            "error": "; ".join(f"{d.code}: {d.message}" for d in exc.diagnostics)})
            worst = max(worst, EXIT_USAGE)
            continue
        finally:
            session.inputs = {}  # the next spec's inputs may be large too
        results.append(result)
        worst = max(worst, result.exit_code)
        if result.exit_code:
            print(f"error: {result.name}: our result is wrong or failed: "
                  f"{result.failure or '; '.join(c.describe() for c in result.comparisons if not c.passed)}",
                  file=sys.stderr)
    return report.document(results, bench, worst, skipped), worst


# ---------------------------------------------------------------------------- doctor, cache
def cmd_doctor(args) -> int:
    from cuvil_dsl.compile import doctor, render_doctor

    rows = doctor()
    print(render_doctor(rows))
    return EXIT_FAILED if any(r.status == "fail" for r in rows) else EXIT_OK


def cmd_cache(args) -> int:
    from cuvil_dsl.compile import cache_clear, cache_info

    if args.action == "clear":
        removed = cache_clear()
        print(f"removed {removed['disk']} disk entries and {removed['memory']} in-memory entries")
        return EXIT_OK
    info = cache_info()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return EXIT_OK
    print(format_cache_info(info))
    return EXIT_OK


def format_cache_info(info: dict) -> str:
    state = "enabled" if info["enabled"] else f"disabled ({info.get('refused') or 'CUVIL_DISABLE_CACHE'})"
    lines = [
        f"cache dir   {info['dir']} ({state})",
        f"entries     {info['entries']} ({info['bytes'] / 1e6:.1f} MB), failed sources kept: {info['failed_sources']}",
    ]
    if info.get("orphaned_temp_files"):
        lines.append(f"temp files  {info['orphaned_temp_files']} left by killed writers "
                     "(removed by the next compile that stores an entry, or `cuvil-dsl cache clear`)")
    counters = info.get("counters") or {}
    scalar = {k: v for k, v in counters.items() if isinstance(v, (int, float))}
    if scalar:
        lines.append("counters    " + ", ".join(f"{k}={v}" for k, v in sorted(scalar.items())))
    hist = counters.get("latency_ms") or counters.get("histogram")
    if isinstance(hist, dict) and hist:
        lines.append("latency ms  " + "  ".join(f"<={k}: {v}" for k, v in hist.items()))
    breaker = info.get("breaker")
    if breaker:
        lines.append(f"breaker     {breaker}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuvil-dsl",
        description="Fused GPU operator pipelines: check, compile (NVRTC to CUBIN), run with CUDA Graphs, "
        "verify against a float64 reference.",
    )
    parser.add_argument("--version", action="version", version=f"cuvil-dsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("check", help="diagnostics for .cuvil and spec files")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--format", choices=("text", "json", "sarif"), default="text")
    p.add_argument("--werror", action="store_true", help="treat warnings as errors")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("run", help="run a spec, check against the reference, time, judge the budget")
    p.add_argument("spec", metavar="SPEC")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu", "reference"))
    p.add_argument("--iterations", type=_positive_int, metavar="N")
    p.add_argument("--json", action="store_true", help="one JSON object on standard output")
    p.add_argument("--save-outputs", metavar="DIR", help="write NAME.npy per result")
    p.add_argument("--arch", help="override target.arch, e.g. sm_90")
    p.add_argument("--sanitize", choices=("memcheck", "racecheck", "synccheck", "initcheck"),
                   help="rerun under compute-sanitizer")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compile", help="emit the stages of a spec's pipeline")
    p.add_argument("spec", metavar="SPEC")
    p.add_argument("--emit", default="cu", help="comma list of ir,plan,cu,ptx,cubin,sass (default: cu)")
    p.add_argument("--out", metavar="DIR", help="write files here instead of printing")
    p.add_argument("--arch", help="e.g. sm_80, sm_90, sm_90a (default: target.arch, or the GPU's)")
    p.add_argument("--dump-ir", metavar="DIR", help="write every stage's output to DIR")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("record", help="run a spec and record a regression case (options as run)")
    p.add_argument("spec", metavar="SPEC")
    p.add_argument("--out", required=True, metavar="DIR", help="the case folder to write")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu", "reference"))
    p.add_argument("--iterations", type=_positive_int, metavar="N")
    p.add_argument("--arch", help="override target.arch, e.g. sm_90")
    p.add_argument("--shape", action="append", metavar="SYM=N",
                   help="record with this size for a symbol (repeatable), e.g. a smaller instance of the spec")
    p.add_argument("--force", action="store_true", help="replace an existing case")
    p.add_argument("--json", action="store_true", help="one JSON object on standard output")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("replay", help="replay a recorded case and check it against the recording")
    p.add_argument("case", metavar="DIR")
    p.add_argument("--backend", choices=("cuda", "cpu", "reference"), help="default: the recorded backend")
    p.add_argument("--arch", help="override target.arch, e.g. sm_90")
    p.add_argument("--json", action="store_true", help="one JSON object on standard output")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("--update", action="store_true", help="re-record the case in place (an intentional change)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("bench", help="time specs side by side with the installed baselines and the roofline")
    p.add_argument("specs", nargs="*", metavar="SPEC")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu", "reference"), default=None,
                   help="one backend for every spec (default auto: cuda with a GPU, else cpu)")
    p.add_argument("--json", action="store_true", help="one JSON object on standard output")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the results as a bar chart (needs matplotlib)")
    p.add_argument("--baselines", default=None, metavar="LIST",
                   help="auto (those on our backend's device; the default), all, none, or a comma list of "
                   "cupy,torch,torch_compile,triton,numpy")
    p.add_argument("--quick", action="store_true", help="a fifth of the timing budget, fewer samples")
    p.add_argument("--rounds", type=_positive_int, default=None, metavar="N",
                   help="time a benchmark's GPU contenders in N interleaved rounds, the budget shared among them "
                        "(default 3; 1: each contender once, in turn)")
    p.add_argument("--from", dest="from_runs", action="append", metavar="RUN.json",
                   help="instead of running specs, report a saved run (bench --json); repeat to merge runs")
    p.add_argument("--compare", metavar="BASE.json",
                   help="also compare ours with a saved earlier run, benchmark by benchmark")
    p.add_argument("--fail-slower", type=_percent, default=None, metavar="PCT",
                   help="with --compare: exit 1 when ours is more than PCT percent slower than in BASE.json")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("doctor", help="GPU, driver, NVRTC, nvcc, CuPy versions and mismatches")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("cache", help="the compile cache")
    p.add_argument("action", choices=("info", "clear"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cache)
    return parser


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5 or 2.5%, got {text!r}") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"expected a percentage of at least 0 and below 1000, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    from cuvil_dsl.spec.models import MAX_EXECUTIONS  # the spec's own bound on run counts

    if value > MAX_EXECUTIONS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_EXECUTIONS}, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    rc = _main(argv)
    if argv is None:
        _exit_now_if_compiles_abandoned(rc)
        # The console entry point ends the process next: the interpreter's last garbage
        # collections walk every object numba and NumPy made (0.1-0.2 s of a CPU run);
        # frozen objects are skipped. Exit handlers and reference counting still run.
        import gc

        gc.freeze()
    return rc


def _exit_now_if_compiles_abandoned(rc: int) -> None:
    """End the process at once when an NVRTC compile ran past CUVIL_COMPILE_TIMEOUT.

    Its thread is still inside libnvrtc, which cannot be interrupted; a normal exit would
    either wait for it (the timeout would not bound the run) or tear the interpreter and
    libnvrtc down under it (an abort instead of the exit status). The timeout is reported
    already, so: run the exit handlers (compile counters, logging), flush, and ``os._exit``.
    Only for the console entry point (``argv is None``): a program calling ``main`` keeps
    its process, whose exit then waits for the compile instead.
    """
    service = sys.modules.get("cuvil_dsl.compile.service")
    if service is None or not service.abandoned_compiles():
        return
    import atexit
    import logging

    atexit.unregister(service._join_abandoned_at_exit)
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print_diagnostics(exc.diagnostics)
        return EXIT_USAGE
    except RunFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except (InternalError, CuvilError, Exception) as exc:  # never a bare traceback
        if knobs.values.traceback:
            traceback.print_exc()
        print(
            f"internal error: {type(exc).__name__}: {exc}\n"
            f"This is a bug in cuvil-dsl {__version__}. Please report it with the command and the files you used "
            "(set CUVIL_TRACEBACK=1 to include the traceback).",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
