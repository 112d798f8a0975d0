"""The on-disk format of a regression case, and reading one back with every file verified.

A case is a folder that replays without anything outside it::

    case.yaml           the manifest: what was run, how, by what, the numbers, a sha256 per file
    spec/NAME.yaml      a copy of the spec, its paths rewritten to point at the copies below
    spec/NAME.cuvil     the pipeline source
    spec/files/X.npy    copies of the spec's .npy inputs, one per input name
    inputs/X.npy        the inputs actually used
    results/Y.npy       the results
    snapshot.json       the memory snapshot after the checked execution
    pipeline.ir         the printed IR
    plan.txt            the fusion plan (backends that have one)
    sources/...         the generated kernel sources

Arrays are ``.npy`` written and read without pickles; bf16 is stored as uint16 bit patterns, its
dtype named in the manifest. Everything else is text. ``case.yaml`` itself is not checksummed,
so its ``checks`` list can be edited by hand (to drop a check a case cannot keep).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import yaml

from cuvil_dsl.runtime.base import Snapshot
from cuvil_dsl.runtime.layout import storage_dtype
from cuvil_dsl.testing.timing import TimingStats
from cuvil_dsl.types import DType

FORMAT_VERSION = 1
MANIFEST = "case.yaml"
# Every check a replay knows, in the order it runs them; `checksums` always runs first.
CHECKS = ("checksums", "inputs", "results", "snapshot", "guards", "determinism", "code", "budget", "time")
_REQUIRED = ("format", "spec", "pipeline", "backend", "run", "inputs", "results", "identity", "files")


class CaseError(Exception):
    """The case cannot be used: no or a corrupt manifest, a missing or unreadable file (exit status 2)."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_array(path: Path, array: np.ndarray, dtype: DType) -> None:
    """Write ``array`` of ``dtype`` as ``.npy`` (bf16 as its uint16 bit patterns)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.ascontiguousarray(array)
    if dtype is DType.BF16:
        data = data.view(np.uint16)
    with open(path, "wb") as fh:
        np.save(fh, data, allow_pickle=False)


def load_array(path: Path, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Read an array written by :func:`save_array`, checking its dtype and shape."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CaseError(f"{path}: cannot read the array: {exc}") from None
    if data.dtype.newbyteorder("=") != storage_dtype(dtype) or data.shape != shape:
        raise CaseError(f"{path}: holds {data.dtype}{list(data.shape)}, the manifest says {dtype.value}{list(shape)}")
    data = data.astype(storage_dtype(dtype), copy=False)
    return data.view(dtype.numpy) if dtype is DType.BF16 else data


@dataclass(frozen=True)
class ArrayEntry:
    """One recorded input or result, as the manifest lists it."""

    name: str
    file: str
    dtype: DType
    shape: tuple[int, ...]
    rtol: float = 0.0
    atol: float = 0.0

    def to_json(self, with_tolerance: bool) -> dict:
        entry = {"file": self.file, "dtype": self.dtype.value, "shape": list(self.shape)}
        return {**entry, "rtol": self.rtol, "atol": self.atol} if with_tolerance else entry


@dataclass(frozen=True)
class Case:
    """A recorded case, its manifest parsed; files are read on demand."""

    path: Path
    manifest: dict

    @property
    def name(self) -> str:
        return str(self.path)

    @property
    def spec_path(self) -> Path:
        return self.path / self.manifest["spec"]["file"]

    @property
    def backend(self) -> str:
        return self.manifest["backend"]

    @property
    def arch(self) -> str | None:
        return self.manifest["identity"]["target"].get("arch")

    @property
    def identity(self) -> dict[str, dict[str, str]]:
        return self.manifest["identity"]

    @property
    def warmup(self) -> int:
        return int(self.manifest["run"]["warmup"])

    @property
    def iterations(self) -> int:
        return int(self.manifest["run"]["iterations"])

    @property
    def checks(self) -> tuple[str, ...]:
        """The checks to apply, in replay order; `checksums` is never left out."""
        listed = set(self.manifest.get("checks") or CHECKS) | {"checksums"}
        return tuple(c for c in CHECKS if c in listed)

    @property
    def timing(self) -> TimingStats | None:
        data = self.manifest.get("timing")
        return TimingStats.from_json(data) if data else None

    @property
    def budget(self) -> dict:
        return self.manifest.get("budget") or {}

    @cached_property
    def input_entries(self) -> dict[str, ArrayEntry]:
        return self._entries("inputs")

    @cached_property
    def result_entries(self) -> dict[str, ArrayEntry]:
        return self._entries("results")

    def _entries(self, section: str) -> dict[str, ArrayEntry]:
        entries = {}
        for name, e in self.manifest[section].items():
            try:
                dtype = DType(e["dtype"])
                entries[name] = ArrayEntry(name, e["file"], dtype, tuple(int(d) for d in e["shape"]),
                                           float(e.get("rtol", 0.0)), float(e.get("atol", 0.0)))
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise CaseError(f"{self.path / MANIFEST}: bad entry for {section}.{name}: {exc!r}") from None
        return entries

    def arrays(self, entries: dict[str, ArrayEntry]) -> dict[str, np.ndarray]:
        return {name: load_array(self.path / e.file, e.dtype, e.shape) for name, e in entries.items()}

    def snapshot(self) -> Snapshot | None:
        if "snapshot" not in self.manifest:
            return None
        try:
            return Snapshot.from_json(json.loads(self._text(self.manifest["snapshot"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise CaseError(f"{self.path / self.manifest['snapshot']}: not a snapshot: {exc!r}") from None

    def sources(self) -> dict[str, str]:
        """Recorded generated sources, by the file name the executor gave them."""
        return {name: self._text(f"sources/{name}") for name in self.manifest.get("sources", [])}

    def _text(self, relative: str) -> str:
        try:
            return (self.path / relative).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CaseError(f"{self.path / relative}: cannot read: {exc}") from None

    def verify_files(self) -> list[str]:
        """One message per recorded file that is missing or whose sha256 differs from the manifest's."""
        problems = []
        for relative, expected in sorted(self.manifest["files"].items()):
            path = self.path / relative
            if not path.is_file():
                problems.append(f"{relative}: missing")
                continue
            try:
                actual = sha256_file(path)
            except OSError as exc:
                problems.append(f"{relative}: unreadable ({exc.strerror or exc})")
                continue
            if actual != expected:
                problems.append(f"{relative}: sha256 {actual[:12]}... differs from the recorded {expected[:12]}... "
                                "(the file was changed after recording)")
        return problems


def load_case(folder: str | Path) -> Case:
    """Read and validate ``folder/case.yaml``; raise :class:`CaseError` when it cannot be used."""
    path = Path(folder)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CaseError(f"{path}: no {MANIFEST} here (not a recorded case)")
    try:
        manifest = yaml.safe_load(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CaseError(f"{manifest_path}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict):
        raise CaseError(f"{manifest_path}: the manifest is not a mapping")
    missing = [key for key in _REQUIRED if key not in manifest]
    if missing:
        raise CaseError(f"{manifest_path}: the manifest lacks {', '.join(missing)}")
    if manifest["format"] != FORMAT_VERSION:
        raise CaseError(f"{manifest_path}: format {manifest['format']!r}, this cuvil-dsl reads format {FORMAT_VERSION}")
    if not isinstance(manifest["files"], dict) or not isinstance(manifest["identity"], dict):
        raise CaseError(f"{manifest_path}: `files` and `identity` must be mappings")
    unknown = [c for c in manifest.get("checks") or () if c not in CHECKS]
    if unknown:
        raise CaseError(f"{manifest_path}: unknown check(s) {', '.join(map(str, unknown))}; "
                        f"the checks are {', '.join(CHECKS)}")
    return Case(path, manifest)


class _ManifestDumper(yaml.SafeDumper):
    """Mappings in block style (one key a line, easy to read and diff), lists of scalars inline."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    inline = all(not isinstance(item, (dict, list)) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=inline)


_ManifestDumper.add_representer(list, _represent_list)


def write_manifest(folder: Path, manifest: dict) -> None:
    """Write ``case.yaml``, adding the sha256 of every other file in ``folder``."""
    files = {p.relative_to(folder).as_posix(): sha256_file(p)
             for p in sorted(folder.rglob("*")) if p.is_file() and p != folder / MANIFEST}
    text = yaml.dump({**manifest, "files": files}, Dumper=_ManifestDumper, sort_keys=False, width=100)
    (folder / MANIFEST).write_text("# A cuvil-dsl regression case: `cuvil-dsl replay` this folder.\n" + text,
                                   encoding="utf-8")
