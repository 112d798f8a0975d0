"""Load a spec file: YAML with positions, validated by the models, paths checked.

Every problem of a spec is collected and raised together as one :class:`UserError`, each
diagnostic at its YAML line and column: unknown keys (E501, with a did-you-mean hint), launch
settings (E503), the target arch (E504), files (E505) and any other bad value (E508).

**Paths.** ``pipeline`` and every input ``file`` are relative to the spec's folder: the folder
of the spec's path as given (a symlinked spec file is not followed to its target's folder).
A path that resolves, after following symlinks, outside that folder's tree is refused (E505),
so a spec received from elsewhere cannot make the tool read arbitrary files; absolute paths
follow the same rule. ``CUVIL_ALLOW_OUTSIDE_PATHS=1`` lifts the rule. A file that is missing,
a folder, or unreadable is E505 at its key.

Example::

    loaded = load_spec("examples/attention_scores.yaml")
    loaded.spec.run.iterations            # 100
    loaded.span_of("kernels", "qk_softmax", "block", key=False)   # where to point a diagnostic
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from cuvil_dsl import knobs
from cuvil_dsl.diagnostics import (SOURCES, Diagnostic, Span, UserError, did_you_mean, error, raise_if_errors,
                                   read_source_bytes)
from cuvil_dsl.spec.models import Spec, input_source_problem, model_at
from cuvil_dsl.spec.yaml_tree import Positions, YamlTree, parse_yaml


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with the positions of its keys and values and its files resolved.

    ``file`` is the spec's path as given (what diagnostics show), ``path`` the resolved one.
    ``pipeline_path`` and ``input_paths`` are checked to exist, to be readable and to lie
    inside the spec's folder (unless allowed otherwise).
    """

    spec: Spec
    path: Path
    file: str
    positions: Positions
    pipeline_path: Path
    input_paths: Mapping[str, Path]

    def span_of(self, *path: str | int, key: bool = True) -> Span:
        """Where ``path`` stands in the spec: its key (or its value with ``key=False``), else the
        nearest parent that is there, else the file start."""
        return self.positions.span_of(tuple(path), key)

    def file_start(self) -> Span:
        return Span.whole_file(self.file)


def load_spec(path: str | os.PathLike) -> LoadedSpec:
    """Read, validate and check the spec at ``path``; raise :class:`UserError` with every problem."""
    file = os.fspath(path)
    text = _read_text(file)
    SOURCES.add(file, text)
    tree = parse_yaml(text, file)
    spec, problems = _validate(tree)
    folder = Path(file).parent
    pipeline_path, input_paths, file_problems = _check_paths(tree, folder)
    problems = [*tree.problems, *problems, *file_problems]
    raise_if_errors(problems)
    assert spec is not None and pipeline_path is not None  # no errors means both were found
    return LoadedSpec(spec, Path(file).resolve(), file, tree.positions, pipeline_path, input_paths)


def _read_text(file: str) -> str:
    data = read_source_bytes(Path(file), "spec")  # regular files only, size-capped
    if isinstance(data, str):
        raise UserError([error("E505", data.replace(f"cannot read {file}", "cannot read the spec"),
                               Span.whole_file(file))])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError([error("E100", "the spec is not UTF-8 text", Span.point(file, line, 1))]) from None


def _validate(tree: YamlTree) -> tuple[Spec | None, list[Diagnostic]]:
    try:
        return Spec.model_validate(tree.data), []
    except ValidationError as exc:
        problems: list[Diagnostic] = []
        seen: set[tuple] = set()
        for err in exc.errors(include_url=False):
            diagnostic = _diagnostic(err, tree)
            where = (diagnostic.span, diagnostic.code) if diagnostic else None
            if diagnostic is not None and where not in seen:
                seen.add(where)
                problems.append(diagnostic)
        return None, problems


def _data_path(loc: tuple, data: Any) -> tuple:
    """The part of a pydantic ``loc`` that exists in ``data``; union tags and missing fields drop out."""
    path: tuple = ()
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            continue
        path += (part,)
    return path


def _value_at(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _code(path: tuple) -> str:
    if path[:1] == ("kernels",) and len(path) >= 2:
        return "E503"
    if path[:2] == ("target", "arch"):
        return "E504"
    return "E508"


_REASONS = {
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "finite_number": "expected a finite number",
    "string_too_short": "must not be empty",
}
_BOUNDS = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}
_BOUND_WORDS = {"gt": "greater than", "ge": "at least", "lt": "less than", "le": "at most"}


def _reason(err: dict) -> str:
    kind = err["type"]
    if kind in _REASONS:
        return _REASONS[kind]
    if kind == "literal_error":
        return f"expected {err['ctx']['expected']}"
    if kind in _BOUNDS:
        bound = _BOUNDS[kind]
        return f"must be {_BOUND_WORDS[bound]} {err['ctx'][bound]}"
    message = err["msg"]
    return message[:1].lower() + message[1:]


def _diagnostic(err: dict, tree: YamlTree) -> Diagnostic | None:
    """One pydantic error as a diagnostic at its YAML position; None if already reported."""
    loc, kind = err["loc"], err["type"]
    path = _data_path(loc, tree.data)
    if any(path[:n] in tree.bad_paths for n in range(len(path))):
        return None
    if kind == "extra_forbidden":  # about the key, so reported even when its value was unreadable
        return _unknown_key(path, tree)
    if path in tree.bad_paths:
        return None
    positions = tree.positions
    if kind == "missing":
        name = loc[-1]
        if path + (name,) in tree.bad_paths:
            return None
        span = positions.span_of(path) if path else Span.whole_file(positions.file)
        where = f" under `{_dotted(path)}`" if path else ""
        return error(_code(path + (name,)), f"missing required key `{name}`{where}", span)
    if kind == "input_source":
        key, message, hint = input_source_problem(err["input"])
        if key == "init":
            return error("E508", f"invalid input `{path[1]}`: {message}, got {_show(err['input']['init'])}",
                         positions.span_of(path + (key,), key=False))
        if key is not None:  # a key no input takes: LANGUAGE.md makes an unknown key E501
            return error("E501", f"unknown key `{key}` under `{_dotted(path)}`: {message}",
                         positions.span_of(path + (key,)), hint=hint)
        return error("E508", f"invalid input `{path[1]}`: {message}", positions.span_of(path, key=True))
    value = _value_at(tree.data, path)
    message = f"invalid value for `{_dotted(path)}`: {_reason(err)}, got {_show(value)}"
    # LANGUAGE.md section 6: spec problems are reported at the YAML key (list items at the item).
    return error(_code(path), message, positions.span_of(path, key=True))


def _unknown_key(path: tuple, tree: YamlTree) -> Diagnostic:
    key, parent = path[-1], path[:-1]
    model = model_at(parent, tree.data)
    allowed = sorted(model.model_fields) if model is not None else []
    hint = did_you_mean(str(key), allowed) or (f"allowed here: {', '.join(allowed)}" if allowed else None)
    where = f" under `{_dotted(parent)}`" if parent else ""
    return error("E501", f"unknown key `{key}`{where}", tree.positions.span_of(path), hint=hint)


def _check_paths(tree: YamlTree, folder: Path) -> tuple[Path | None, dict[str, Path], list[Diagnostic]]:
    """Resolve ``pipeline`` and every input ``file`` found in the raw data (so path problems are
    reported together with validation errors), checking each one."""
    problems: list[Diagnostic] = []

    def check(raw: Any, path: tuple) -> Path | None:
        if not isinstance(raw, str) or not raw:
            return None  # validation reports it
        problem = _file_problem(raw, folder)
        if problem is None:
            return folder / raw
        message, hint = problem
        problems.append(error("E505", message, tree.positions.span_of(path), hint=hint))
        return None

    data = tree.data
    pipeline_path = check(data.get("pipeline"), ("pipeline",))
    inputs: dict[str, Path] = {}
    raw_inputs = data.get("inputs")
    for name, source in (raw_inputs.items() if isinstance(raw_inputs, dict) else ()):
        if isinstance(source, dict) and "init" not in source:
            found = check(source.get("file"), ("inputs", name, "file"))
            if found is not None:
                inputs[name] = found
    return pipeline_path, inputs, problems


def _file_problem(raw: str, folder: Path) -> tuple[str, str | None] | None:
    """Why the file ``raw`` (relative to ``folder``) cannot be used, as (message, hint); None if it can."""
    target = folder / raw
    try:
        real = target.resolve()
        inside = real.is_relative_to(folder.resolve())
    except (OSError, RuntimeError, ValueError) as exc:  # symlink loops, bad names
        return f"cannot resolve `{raw}`: {exc}", None
    if not inside and not knobs.values.allow_outside_paths:
        return (
            f"`{raw}` is outside the spec's folder ({folder.resolve()})",
            "keep files next to the spec, or set CUVIL_ALLOW_OUTSIDE_PATHS=1 to allow it",
        )
    try:
        if not real.exists():
            return f"file not found: {target}", None
        if not real.is_file():
            return f"not a file: {target}", None
    except (OSError, ValueError) as exc:  # a name too long for the file system, a NUL byte
        return f"cannot use `{_short(raw)}`: {getattr(exc, 'strerror', None) or exc}", None
    if not os.access(real, os.R_OK):
        return f"cannot read {target}: permission denied", None
    return None


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
