"""The stages of a build, named like file extensions: ir, plan, cu, ptx, cubin, sass.

``cuvil-dsl compile`` prints or writes any of them; ``--dump-ir DIR`` (or ``CUVIL_DUMP_DIR``)
writes every stage, numbered in pipeline order, so a change shows up as a file diff.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from cuvil_dsl import knobs
from cuvil_dsl.diagnostics import Span, UserError, error, raise_if_errors

STAGES = ("ir", "plan", "cu", "ptx", "cubin", "sass")


@dataclass
class Build:
    """The artifacts of one spec's pipeline for one arch, computed lazily stage by stage."""

    spec_file: str
    arch: str
    target: object  # the spec's validated `target` section
    ir_text: str
    plan: object
    rendered: list = field(default_factory=list)
    compiled: list | None = None


def _resolve_arch(loaded, cli_arch: str | None) -> str:
    from cuvil_dsl.driver import gpu_available
    from cuvil_dsl.spec.models import _arch as validate_arch

    arch = cli_arch or loaded.spec.target.arch
    if cli_arch:
        try:
            validate_arch(cli_arch)
        except ValueError as exc:
            raise UserError([error("E504", f"--arch {cli_arch}: {exc}", Span.whole_file("<command line>"))]) from None
    if arch == "auto":
        if not gpu_available():
            span = loaded.span_of("target", "arch", key=False)
            raise UserError([error("E504", "`arch: auto` needs a GPU to read the architecture from, and none is here",
                                   span, "pass --arch sm_90 (or sm_80, sm_90a, ...)")])
        from cuvil_dsl.runtime.device import device_arch

        arch = device_arch(0)
    return arch


def build(spec_path: str | Path, arch: str | None = None) -> Build:
    from cuvil_dsl.codegen import render_cuda
    from cuvil_dsl.driver import kernel_overrides, load_pipeline
    from cuvil_dsl.ir.printer import format_pipeline
    from cuvil_dsl.passes import plan_pipeline
    from cuvil_dsl.spec import bind, check_kernel_names, load_spec

    loaded = load_spec(spec_path)
    pipeline, _warnings = load_pipeline(loaded)
    binding = bind(loaded, pipeline)
    chosen = _resolve_arch(loaded, arch)
    plan, diags = plan_pipeline(pipeline, kernel_overrides(loaded), chosen)
    raise_if_errors(list(diags) + check_kernel_names(loaded, [k.name for k in plan.kernels]))
    t = loaded.spec.target
    rendered = render_cuda(plan, binding.sizes, chosen, fast_math=t.fast_math, tf32=t.tf32)
    return Build(loaded.file, chosen, t, format_pipeline(pipeline), plan, rendered)


def compile_build(b: Build, progress=None) -> list:
    from cuvil_dsl.compile import CompileUnit, compile_units

    if b.compiled is None:
        t = b.target
        extra = ("-lineinfo",) if knobs.values.lineinfo else ()
        units = [CompileUnit(k.name, k.source, (k.entry,), tuple(k.options) + extra) for k in b.rendered]
        b.compiled = compile_units(units, b.arch, compiler=t.compiler, fallback=t.fallback,
                                   fast_math=t.fast_math, options=tuple(t.options), progress=progress)
    return b.compiled


def stage_outputs(b: Build, stage: str) -> list[tuple[str, str | bytes]]:
    """(file name, content) pairs of one stage."""
    from cuvil_dsl.passes.plan import format_plan

    if stage == "ir":
        return [(f"{b.plan.pipeline.name}.ir", b.ir_text)]
    if stage == "plan":
        return [(f"{b.plan.pipeline.name}.plan", format_plan(b.plan))]
    if stage == "cu":
        return [(f"{k.name}.cu", k.source) for k in b.rendered]
    if stage == "ptx":
        from cuvil_dsl.compile import CompileUnit, emit_ptx

        t = b.target
        return [(f"{k.name}.ptx", emit_ptx(CompileUnit(k.name, k.source, (k.entry,), tuple(k.options)), b.arch,
                                           fast_math=t.fast_math, options=tuple(t.options))) for k in b.rendered]
    if stage == "cubin":
        return [(f"{c.unit.name}.cubin", c.cubin) for c in compile_build(b)]
    if stage == "sass":
        from cuvil_dsl.compile import disassemble

        return [(f"{c.unit.name}.sass", disassemble(c.cubin)) for c in compile_build(b)]
    raise ValueError(stage)


def compile_spec(spec_path, emit: list[str], out: str | None, arch: str | None, dump_ir: str | None,
                 stdout: TextIO) -> list[Path]:
    bad = [s for s in emit if s not in STAGES]
    if bad:
        raise UserError([error("E508", f"unknown stage `{bad[0]}` for --emit", Span.whole_file("<command line>"),
                               f"stages: {', '.join(STAGES)}")])
    if "cubin" in emit and not out:
        raise UserError([error("E508", "`--emit cubin` writes binary files: give --out DIR",
                               Span.whole_file("<command line>"))])
    b = build(spec_path, arch)
    written: list[Path] = []
    dump = dump_ir or knobs.values.dump_dir
    if dump:
        written += dump_all(b, Path(dump))
    for stage in emit:
        outputs = stage_outputs(b, stage)
        if out:
            written += _write(Path(out), outputs)
        else:
            for name, content in outputs:
                if len(outputs) > 1:
                    stdout.write(f"// ---- {name}\n")
                stdout.write(content if isinstance(content, str) else content.decode("latin-1"))
                if isinstance(content, str) and not content.endswith("\n"):
                    stdout.write("\n")
    return written


def dump_all(b: Build, folder: Path) -> list[Path]:
    written: list[Path] = []
    for i, stage in enumerate(STAGES, 1):
        try:
            outputs = stage_outputs(b, stage)
        except Exception as exc:  # a missing tool (cuobjdump) must not hide the stages before it
            outputs = [(f"{stage}.unavailable.txt", f"{type(exc).__name__}: {exc}\n")]
        written += _write(folder / f"{i:02d}_{stage}", outputs)
    return written


def _write(folder: Path, outputs) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, content in outputs:
        path = folder / name
        tmp = path.with_name(path.name + ".tmp")
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content, encoding="utf-8")
        tmp.replace(path)
        paths.append(path)
    return paths
