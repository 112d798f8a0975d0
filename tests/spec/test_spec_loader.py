"""Loading spec files: every problem at its YAML line and column, all reported together."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvil_dsl.diagnostics import Diagnostic, Span, UserError, render
from cuvil_dsl.spec import load_spec


def write_spec(folder: Path, text: str, name: str = "s.yaml") -> Path:
    (folder / "p.cuvil").write_text("pipeline p() -> y: f32[1] {}\n")
    path = folder / name
    path.write_text(text)
    return path


def problems(folder: Path, text: str) -> list[Diagnostic]:
    with pytest.raises(UserError) as caught:
        load_spec(write_spec(folder, text))
    return list(caught.value.diagnostics)


def only(folder: Path, text: str) -> Diagnostic:
    found = problems(folder, text)
    assert len(found) == 1, [str(d.span) + " " + d.message for d in found]
    return found[0]


def at(diag: Diagnostic) -> tuple[str, int, int]:
    return diag.code, diag.span.line, diag.span.column


def test_minimal_spec_loads(tmp_path):
    loaded = load_spec(write_spec(tmp_path, "pipeline: p.cuvil\n"))
    assert loaded.spec.pipeline == "p.cuvil"
    assert loaded.pipeline_path.resolve() == (tmp_path / "p.cuvil").resolve()
    assert loaded.path == (tmp_path / "s.yaml").resolve()
    assert loaded.input_paths == {}


def test_misspelled_key_under_run(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\nrun:\n  warmup: 1\n  iteratons: 5\n")
    assert at(diag) == ("E501", 4, 3)
    assert diag.hint == "did you mean `iterations`?"
    assert "iteratons" in diag.message and "`run`" in diag.message


def test_unknown_top_level_key(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\ndescription: hello\n")
    assert at(diag) == ("E501", 2, 1)
    assert diag.hint is not None and "allowed here" in diag.hint


def test_nested_unknown_keys(tmp_path):
    text = (
        "pipeline: p.cuvil\n"
        "kernels:\n"
        "  qk:\n"
        "    launch_bounds: {max_threads: 128, min_block: 2}\n"
        "    tiles: {m: 64}\n"
        "target: {archh: sm_90}\n"
    )
    found = sorted(at(d) + (d.hint,) for d in problems(tmp_path, text))
    assert found == [
        ("E501", 4, 39, "did you mean `min_blocks`?"),
        ("E501", 5, 5, "did you mean `tile`?"),
        ("E501", 6, 10, "did you mean `arch`?"),
    ]


def test_key_meaningful_only_for_another_init(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\ninputs:\n  x: {init: uniform, std: 2}\n")
    assert at(diag) == ("E501", 3, 22)
    assert diag.hint == "allowed here: high, init, low, seed"
    diag = only(tmp_path, "pipeline: p.cuvil\ninputs:\n  x: {init: zeros, seed: 2}\n")
    assert at(diag) == ("E501", 3, 20)


def test_duplicate_keys(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\nrun: {warmup: 1}\nrun: {warmup: 2}\n")
    assert at(diag) == ("E501", 3, 1)
    assert "duplicate key `run`" in diag.message and "line 2" in diag.message
    diag = only(tmp_path, "pipeline: p.cuvil\nshapes: {M: 1, M: 2}\n")
    assert at(diag) == ("E501", 2, 16)


def test_launch_settings(tmp_path):
    text = (
        "pipeline: p.cuvil\n"
        "kernels:\n"
        "  qk_softmax:\n"
        "    block: 100\n"
        "    max_registers: 300\n"
        "    tile: {m: 48, n: 64, k: 32}\n"
        "  other:\n"
        "    launch_bounds: {max_threads: 2048, min_blocks: 0}\n"
        "    block: 64\n"
    )
    found = sorted(at(d) for d in problems(tmp_path, text))
    assert found == [("E503", 4, 5), ("E503", 5, 5), ("E503", 6, 12), ("E503", 8, 21), ("E503", 8, 40)]


def test_block_over_launch_bounds(tmp_path):
    text = "pipeline: p.cuvil\nkernels:\n  k:\n    launch_bounds: {max_threads: 128}\n    block: 256\n"
    diag = only(tmp_path, text)
    assert at(diag) == ("E503", 5, 5)
    assert "max_threads" in diag.message


def test_missing_launch_bound_key(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\nkernels:\n  k:\n    launch_bounds: {min_blocks: 2}\n")
    assert at(diag) == ("E503", 4, 5)
    assert "missing required key `max_threads`" in diag.message


@pytest.mark.parametrize(
    ("arch", "words"),
    [("sm_70", "sm_75 and newer"), ("sm_foo", "unknown arch"), ("90", "unknown arch"), ("sm_86a", "unknown arch")],
)
def test_arch(tmp_path, arch, words):
    diag = only(tmp_path, f"pipeline: p.cuvil\ntarget:\n  arch: {arch}\n")
    assert at(diag) == ("E504", 3, 3)
    assert words in diag.message


@pytest.mark.parametrize("arch", ["auto", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"])
def test_supported_arches(tmp_path, arch):
    assert load_spec(write_spec(tmp_path, f"pipeline: p.cuvil\ntarget: {{arch: {arch}}}\n")).spec.target.arch == arch


def test_other_target_values(tmp_path):
    found = sorted(at(d) for d in problems(tmp_path, "pipeline: p.cuvil\ntarget: {backend: gpu, tf32: 1}\n"))
    assert found == [("E508", 2, 10), ("E508", 2, 24)]


def test_wrong_type_is_e508_at_the_key(tmp_path):
    diag = only(tmp_path, 'pipeline: p.cuvil\nrun:\n  iterations: "ten"\n')
    assert at(diag) == ("E508", 3, 3)
    assert diag.message == 'invalid value for `run.iterations`: expected an integer, got "ten"'


def test_missing_pipeline(tmp_path):
    diag = only(tmp_path, "run: {warmup: 1}\n")
    assert at(diag) == ("E508", 1, 1)
    assert "missing required key `pipeline`" in diag.message


def test_unknown_init_and_source(tmp_path):
    text = "pipeline: p.cuvil\ninputs:\n  a: {init: normall}\n  b: {seed: 1}\n  c: 3\n"
    found = sorted(at(d) for d in problems(tmp_path, text))
    assert found == [("E508", 3, 13), ("E508", 4, 3), ("E508", 5, 3)]


def test_a_misspelt_source_key_is_pointed_at_with_the_fix(tmp_path):
    text = "pipeline: p.cuvil\ninputs:\n  a: {random: normal, seed: 1}\n  b: {fil: b.npy}\n  c: {colour: 3}\n"
    found = {d.span.line: d for d in problems(tmp_path, text)}
    assert [at(found[line]) for line in (3, 4, 5)] == [("E501", 3, 7), ("E501", 4, 7), ("E501", 5, 7)]
    assert found[3].message.startswith("unknown key `random` under `inputs.a`: an input needs `init`")
    assert found[3].hint == "write `init: normal`"
    assert found[4].hint == "did you mean `file`?"
    assert found[5].hint.startswith("an input's keys: file, high, init")


def test_all_problems_together(tmp_path):
    text = "pipeline: missing.cuvil\nrun: {iteratons: 1, warmup: -2}\nkernels: {k: {block: 33}}\n"
    assert sorted(at(d) for d in problems(tmp_path, text)) == [
        ("E501", 2, 7),
        ("E503", 3, 15),
        ("E505", 1, 1),
        ("E508", 2, 21),
    ]


def test_exponent_numbers_are_numbers(tmp_path):
    spec = load_spec(write_spec(tmp_path, "pipeline: p.cuvil\ncheck: {rtol: 1e-3, atol: 2.0E+1}\n")).spec
    assert spec.check.rtol == 1e-3 and spec.check.atol == 20.0


def test_python_tags_are_refused(tmp_path):
    marker = tmp_path / "constructed"
    text = f"pipeline: p.cuvil\nparams:\n  a: !!python/object/apply:os.system ['touch {marker}']\n"
    diag = only(tmp_path, text)
    assert at(diag) == ("E508", 3, 6)
    assert "!!python/object/apply:os.system" in diag.message
    assert not marker.exists()


def test_unknown_key_with_a_refused_value(tmp_path):
    found = problems(tmp_path, "pipeline: p.cuvil\nrun:\n  iteration: !!binary aGk=\n")
    assert sorted(at(d) for d in found) == [("E501", 3, 3), ("E508", 3, 14)]


def test_yaml_syntax_error(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\nrun: {warmup: 1\n")
    assert diag.code == "E100" and diag.span.line == 3


def test_tab_indentation_is_a_syntax_error(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\nrun:\n\twarmup: 1\n")
    assert at(diag) == ("E100", 3, 1)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "- a\n- b\n", "just text\n"])
def test_empty_or_not_a_mapping(tmp_path, text):
    diag = only(tmp_path, text)
    assert diag.code == "E508" and diag.span.line == 1


def test_merge_keys_refused(tmp_path):
    found = problems(tmp_path, "base: &b {warmup: 1}\npipeline: p.cuvil\nrun:\n  <<: *b\n")
    assert sorted(at(d) for d in found) == [("E501", 1, 1), ("E508", 4, 3)]


def test_alias_recursion_is_bounded(tmp_path):
    assert problems(tmp_path, "pipeline: p.cuvil\noptions: &a [*a]\n")[0].code == "E508"


def test_alias_bomb_is_bounded(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 7)]
    assert "more than" in only(tmp_path, "\n".join(lines) + "\n").message


def test_deep_nesting_is_bounded(tmp_path):
    assert only(tmp_path, "pipeline: " + "[" * 3000 + "]" * 3000 + "\n").code == "E508"


def test_missing_files(tmp_path):
    text = "pipeline: p.cuvil\ninputs:\n  w: {file: w.npy}\n  v: {file: sub}\n"
    (tmp_path / "sub").mkdir()
    found = problems(tmp_path, text)
    assert sorted(at(d) for d in found) == [("E505", 3, 7), ("E505", 4, 7)]
    assert any("not found" in d.message for d in found) and any("not a file" in d.message for d in found)


def test_missing_pipeline_file(tmp_path):
    diag = only(tmp_path, "pipeline: nope.cuvil\n")
    assert at(diag) == ("E505", 1, 1)


def test_unreadable_file(tmp_path, monkeypatch):
    (tmp_path / "w.npy").write_bytes(b"")
    write_spec(tmp_path, "pipeline: p.cuvil\ninputs: {w: {file: w.npy}}\n")
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # root would read a chmod-0 file
    with pytest.raises(UserError) as caught:
        load_spec(tmp_path / "s.yaml")
    diag = caught.value.diagnostics[0]
    assert diag.code == "E505" and "cannot read" in diag.message


def test_input_paths_relative_to_the_spec(tmp_path, monkeypatch):
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "data").mkdir()
    (folder / "data" / "w.npy").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    loaded = load_spec(write_spec(folder, "pipeline: p.cuvil\ninputs: {w: {file: data/w.npy}}\n"))
    assert loaded.input_paths["w"].resolve() == (folder / "data" / "w.npy").resolve()


def test_outside_paths_refused_then_allowed(tmp_path, monkeypatch):
    folder = tmp_path / "case"
    folder.mkdir()
    (tmp_path / "shared.npy").write_bytes(b"")
    text = f"pipeline: p.cuvil\ninputs:\n  w: {{file: ../shared.npy}}\n  v: {{file: {tmp_path / 'shared.npy'}}}\n"
    monkeypatch.delenv("CUVIL_ALLOW_OUTSIDE_PATHS", raising=False)
    found = problems(folder, text)
    assert sorted(at(d) for d in found) == [("E505", 3, 7), ("E505", 4, 7)]
    assert all("outside the spec's folder" in d.message and "CUVIL_ALLOW_OUTSIDE_PATHS" in d.hint for d in found)
    monkeypatch.setenv("CUVIL_ALLOW_OUTSIDE_PATHS", "1")
    assert set(load_spec(folder / "s.yaml").input_paths) == {"w", "v"}


def test_symlink_out_of_the_folder_is_outside(tmp_path, monkeypatch):
    monkeypatch.delenv("CUVIL_ALLOW_OUTSIDE_PATHS", raising=False)
    folder = tmp_path / "case"
    folder.mkdir()
    (tmp_path / "secret.npy").write_bytes(b"")
    (folder / "w.npy").symlink_to(tmp_path / "secret.npy")
    diag = only(folder, "pipeline: p.cuvil\ninputs: {w: {file: w.npy}}\n")
    assert diag.code == "E505" and "outside" in diag.message


def test_positions_and_span_of(tmp_path):
    text = "pipeline: p.cuvil\nkernels:\n  qk_softmax:\n    block: 256\ntarget: {options: [-G, -lineinfo]}\n"
    loaded = load_spec(write_spec(tmp_path, text))
    assert loaded.span_of("kernels", "qk_softmax", "block") == Span(loaded.file, 4, 5, 4, 10)
    assert loaded.span_of("kernels", "qk_softmax", "block", key=False) == Span(loaded.file, 4, 12, 4, 15)
    assert loaded.span_of("target", "options", 1).column == 24
    # absent paths fall back to the nearest parent, then the file start
    assert loaded.span_of("kernels", "qk_softmax", "tile", "m").line == 3
    assert loaded.span_of("shapes", "M") == Span.whole_file(loaded.file)
    assert loaded.spec.target.options == ("-G", "-lineinfo")


def test_diagnostics_render_with_carets(tmp_path):
    diag = only(tmp_path, "pipeline: p.cuvil\nrun:\n  iteratons: 5\n")
    assert render(diag).splitlines()[1:] == [
        "  |",
        "3 |   iteratons: 5",
        "  |   ^^^^^^^^^",
        "  = help: did you mean `iterations`?",
    ]


def test_spec_file_missing(tmp_path):
    with pytest.raises(UserError) as caught:
        load_spec(tmp_path / "absent.yaml")
    assert caught.value.diagnostics[0].code == "E505"


def test_spec_not_utf8(tmp_path):
    (tmp_path / "s.yaml").write_bytes(b"pipeline: p.cuvil\n# \xff\n")
    with pytest.raises(UserError) as caught:
        load_spec(tmp_path / "s.yaml")
    assert at(caught.value.diagnostics[0]) == ("E100", 2, 1)


_TOKENS = list("abkp: -_{}[],&*!|>'\"#\n\t.0123456789e%@?<=~") + [
    "\x00", "pipeline: p.cuvil\n", "inputs:", "kernels:", "  ", "!!python/object:os.system", "&a ", "*a", "<<: ",
    "---\n", "- ", "{init: normal}", "block: 100", "!!int ", "1e-3", ".inf", "\ufeff", "\r\n",
]
_YAMLISH = st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_YAMLISH)
def test_random_text_only_raises_user_errors(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_spec(path)
    except UserError as exc:
        assert exc.diagnostics
        for diag in exc.diagnostics:
            render(diag)
