"""The persistent compile cache: an in-memory LRU above a per-user directory of CUBIN entries.

Key: sha256 over everything that can change the binary (source, kernels, unit name,
compiler and its exact version, the options *in order*, arch, package version, a hash of
this package's own code generator and compiler sources, and knobs marked
``affects_binary``). Option order matters (``-maxrregcount`` given twice: the last one
wins), so options are never sorted.

Entry file: ``MAGIC | format | payload length | sha256(payload) | payload`` where the
payload is a JSON metadata block followed by the CUBIN. A truncated, corrupt or foreign
file is a miss and is removed; it can never crash a compile or hand back a bad binary.
Files are written to a temporary name in the same folder, fsynced, then ``os.replace``d,
so a reader in another process sees either the old complete file or the new one. A writer
killed between the two leaves its temporary file; the first store of a later process removes
those untouched for an hour (``orphans``), as does ``cuvil-dsl cache clear``.

A directory owned by someone else, or writable by group/others, is refused (anyone who can
write there could plant a binary we would run on the GPU): the service then compiles
without a disk cache and says so once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import stat
import struct
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Iterator

import cuvil_dsl
from cuvil_dsl import knobs
from cuvil_dsl.compile.units import ELF_MAGIC, BuildArtifact, CompileUnit, KernelResources

logger = logging.getLogger("cuvil_dsl.compile")

MAGIC = b"CUVILCB\x00"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")  # magic, format, payload length, sha256(payload)
_META_LEN = struct.Struct("<I")
ENTRY_SUFFIX = ".entry"


@functools.cache
def sources_fingerprint() -> str:
    """sha256 of every ``.py`` under ``cuvil_dsl/codegen`` and ``cuvil_dsl/compile``, once per process.

    Editing the code generator or this service must invalidate binaries built by the old
    code even when the version number did not change (a developer checkout).
    """
    package = Path(cuvil_dsl.__file__).resolve().parent
    digest = hashlib.sha256()
    for folder in ("codegen", "compile"):
        for path in sorted((package / folder).rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


_KEYS: dict[tuple, str] = {}  # in-process memo of cache_key, by everything the key is made of
_KEYS_LIMIT = 4096


def cache_key(unit: CompileUnit, arch: str, compiler: str, compiler_version: str, options: tuple[str, ...]) -> str:
    """The hex sha256 naming one binary. Every field is length-prefixed so no two field lists collide.

    Memoised in-process by the same fields (the knobs that affect the binary read now), so an
    in-process hit does not hash the source again.
    """
    binary_knobs = tuple((name, repr(knob.get())) for name, knob in sorted(knobs.all_knobs().items())
                         if knob.affects_binary)
    memo = (unit, arch, compiler, compiler_version, tuple(options), binary_knobs)
    key = _KEYS.get(memo)
    if key is None:
        key = _hash_key(unit, arch, compiler, compiler_version, options, binary_knobs)
        if len(_KEYS) >= _KEYS_LIMIT:
            _KEYS.clear()
        _KEYS[memo] = key
    return key


def _hash_key(unit: CompileUnit, arch: str, compiler: str, compiler_version: str, options: tuple[str, ...],
              binary_knobs: tuple[tuple[str, str], ...]) -> str:
    digest = hashlib.sha256()

    def part(label: str, value: str) -> None:
        data = value.encode("utf-8")
        digest.update(f"{label}:{len(data)}:".encode() + data)

    part("format", str(FORMAT_VERSION))
    part("cuvil", cuvil_dsl.__version__)
    part("sources", sources_fingerprint())
    part("unit", unit.name)
    part("source", unit.source)
    for kernel in unit.kernels:
        part("kernel", kernel)
    part("compiler", compiler)
    part("compiler_version", compiler_version)
    part("arch", arch)
    for option in options:
        part("option", option)
    for name, value in binary_knobs:
        part(f"knob:{name}", value)
    return digest.hexdigest()


def encode_entry(key: str, artifact: BuildArtifact) -> bytes:
    meta = {
        "key": key,
        "resources": [r.to_json() for r in artifact.resources.values()],
        "log": artifact.log,
        "compiler": artifact.compiler,
        "compiler_version": artifact.compiler_version,
        "compile_ms": artifact.compile_ms,
        "nvrtc_result": artifact.nvrtc_result,
        "fallback": artifact.fallback,
    }
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode("utf-8")
    payload = _META_LEN.pack(len(meta_bytes)) + meta_bytes + artifact.cubin
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), hashlib.sha256(payload).digest()) + payload


def decode_entry(key: str, data: bytes) -> BuildArtifact | None:
    """The artifact, or ``None`` for anything that is not an intact entry for exactly ``key``."""
    if len(data) < _HEADER.size:
        return None
    magic, fmt, length, checksum = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if magic != MAGIC or fmt != FORMAT_VERSION or length != len(payload):
        return None
    if hashlib.sha256(payload).digest() != checksum or len(payload) < _META_LEN.size:
        return None
    (meta_len,) = _META_LEN.unpack_from(payload)
    meta_end = _META_LEN.size + meta_len
    cubin = payload[meta_end:]
    if not cubin.startswith(ELF_MAGIC):
        return None
    try:
        meta = json.loads(payload[_META_LEN.size : meta_end].decode("utf-8"))
        if meta["key"] != key or meta["compiler"] not in ("nvrtc", "nvcc"):
            return None
        resources = {r["name"]: KernelResources.from_json(r) for r in meta["resources"]}
        return BuildArtifact(
            cubin=cubin,
            resources=resources,
            log=str(meta["log"]),
            compiler=meta["compiler"],
            compiler_version=str(meta["compiler_version"]),
            compile_ms=float(meta["compile_ms"]),
            nvrtc_result=meta["nvrtc_result"],
            fallback=meta["fallback"],
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def atomic_write(path: Path, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part.

    ``durable`` also fsyncs, so a power cut cannot leave an empty entry behind a completed
    rename; statistics skip it because an fsync costs milliseconds.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    with contextlib.suppress(OSError):  # make the rename itself durable; not all file systems allow it
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


ORPHAN_AGE_S = 3600.0  # a temporary file untouched this long was left by a writer that died (writes take ms)
TEMP_FOLDERS = ("", "cubin", "numba", "ir")  # where atomic_write writes under a cache root (none nested)
_SWEPT: set[Path] = set()  # cache roots this process has swept (once each, at its first store)
_SWEPT_LOCK = threading.Lock()


def orphans(root: Path, *, remove: bool, max_age_s: float = ORPHAN_AGE_S, now: float | None = None) -> int:
    """The temporary files (``.NAME.XXXX.tmp``, see :func:`atomic_write`) that writers killed between
    their write and their rename left in the cache's folders (``TEMP_FOLDERS`` under ``root``, not
    below them): regular files of this user untouched for ``max_age_s``. Counted, or with ``remove``
    deleted (how many). A link, a file of another user or a young file (a writer may still be at
    work) is left alone.
    """
    now = time.time() if now is None else now
    uid, found = os.getuid(), 0
    for sub in TEMP_FOLDERS:
        try:
            names = os.listdir(root / sub)
        except OSError:  # not made yet, or not a folder
            continue
        for name in names:
            if not (name.startswith(".") and name.endswith(".tmp")):
                continue
            path = root / sub / name
            try:
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or now - info.st_mtime < max_age_s:
                    continue
                if remove:
                    os.unlink(path)
            except OSError:  # gone meanwhile (its writer finished, or another sweep)
                continue
            found += 1
    return found


class MemoryCache:
    """Process-wide LRU of artifacts by key, so a repeated request costs a dict lookup.

    It also remembers whole answers (:meth:`put_batch`): the results a ``compile_units`` call
    gave when every unit was already here, by everything the call's keys were made of, so the
    same call again skips planning and hashing. An answer is given only while all its keys are
    still in the LRU, and is dropped with them (eviction or :meth:`clear`).
    """

    BATCH_LIMIT = 256

    def __init__(self, capacity: int = 1024):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._items: OrderedDict[str, BuildArtifact] = OrderedDict()
        self._batches: OrderedDict[tuple, tuple[tuple[str, ...], tuple]] = OrderedDict()

    def get(self, key: str) -> BuildArtifact | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: str, artifact: BuildArtifact) -> None:
        with self._lock:
            self._items[key] = artifact
            self._items.move_to_end(key)
            if len(self._items) > self.capacity:
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
                self._batches.clear()  # rare; cheaper than finding the answers that used the evicted keys

    def get_batch(self, memo: tuple) -> tuple | None:
        """The results remembered for ``memo``, if every key they came from is still here (each is
        then used again, as :meth:`get` would)."""
        with self._lock:
            found = self._batches.get(memo)
            if found is None:
                return None
            keys, results = found
            items = self._items
            for key in keys:
                if key not in items:
                    del self._batches[memo]
                    return None
            for key in keys:
                items.move_to_end(key)
            return results

    def put_batch(self, memo: tuple, keys: tuple[str, ...], results: tuple) -> None:
        with self._lock:
            if all(key in self._items for key in keys):
                self._batches[memo] = (keys, results)
                self._batches.move_to_end(memo)
                while len(self._batches) > self.BATCH_LIMIT:
                    self._batches.popitem(last=False)

    def clear(self) -> int:
        with self._lock:
            count = len(self._items)
            self._items.clear()
            self._batches.clear()
            return count

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


MEMORY = MemoryCache()


DURATIONS_FILE = "durations.json"
DURATIONS_LIMIT = 4096  # units remembered; the least recently compiled are forgotten first


class Durations:
    """How long units took to compile: ``"<arch> <unit name>"`` -> (milliseconds, source length).

    The service starts a batch's longest compiles first and asks here before it estimates a
    unit from its source. Kept per process, and for a disk cache also in ``durations.json`` at
    its root (read once, merged and rewritten under ``durations.lock`` after a batch that
    compiled, like ``counters.json``), so the next process orders its compiles by what this one
    measured. It only orders work: an unreadable or damaged file is an empty one and a failed
    write is dropped silently.
    """

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._items: dict[str, tuple[float, int]] | None = None if path is not None else {}
        self._unsaved: dict[str, tuple[float, int]] = {}

    def lookup(self, names: list[str]) -> list[tuple[float, int] | None]:
        with self._lock:
            if self._items is None:
                self._items = {**_read_durations(self.path), **self._unsaved}
            return [self._items.get(name) for name in names]

    def record(self, name: str, ms: float, size: int) -> None:
        entry = (round(float(ms), 3), int(size))
        with self._lock:
            if self._items is not None:
                self._items.pop(name, None)
                self._items[name] = entry
            if self.path is not None:
                self._unsaved.pop(name, None)
                self._unsaved[name] = entry

    def save(self) -> bool:
        """Merge what this process recorded into the file; True when there was nothing to write or it was written."""
        with self._lock:
            unsaved, self._unsaved = self._unsaved, {}
        if not unsaved or self.path is None:
            return True
        try:
            fd = os.open(self.path.with_name("durations.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                merged = _read_durations(self.path)
                for name, entry in unsaved.items():
                    merged.pop(name, None)
                    merged[name] = entry
                kept = dict(list(merged.items())[-DURATIONS_LIMIT:])
                data = {"format": 1, "units": {name: list(entry) for name, entry in kept.items()}}
                atomic_write(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"), durable=False)
            finally:
                os.close(fd)
        except Exception:  # noqa: BLE001 - a scheduling hint must never fail a compile
            with self._lock:  # keep them for the next batch, unless newer ones came meanwhile
                self._unsaved = {**unsaved, **self._unsaved}
            return False
        return True


def _read_durations(path: Path) -> dict[str, tuple[float, int]]:
    data = _read_own_file(path)
    if not isinstance(data, bytes):
        return {}
    try:
        units = json.loads(data.decode("utf-8"))["units"]
        found = {}
        for name, (ms, size) in units.items():
            if isinstance(name, str) and isinstance(ms, (int, float)) and isinstance(size, int) and 0 < ms < 1e8:
                found[name] = (float(ms), size)
        return found
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


class DiskCache:
    """One checked cache directory: ``cubin/`` entries, ``locks/`` for cross-process single flight,
    ``failed/`` for sources that did not compile."""

    def __init__(self, root: Path):
        self.root = root
        self.entries_dir = root / "cubin"
        self.locks_dir = root / "locks"
        self.failed_dir = root / "failed"
        self.durations = Durations(root / DURATIONS_FILE)
        self._warned_write = False

    def path_for(self, key: str) -> Path:
        return self.entries_dir / f"{key}{ENTRY_SUFFIX}"

    def load(self, key: str) -> BuildArtifact | None:
        """The entry for ``key``, or None: missing, damaged, or not a plain file of ours.

        Only a regular file owned by this user is read, opened without following symlinks:
        a symlink, a file of another user or anything else found under an entry's name was
        not written by :meth:`store` and is removed (a directory is left alone, and reported).
        """
        path = self.path_for(key)
        data = _read_own_file(path)
        if data is None:
            return None
        if isinstance(data, str):
            logger.warning("cuvil-dsl: ignoring compile cache entry %s: %s", path, data)
            if data != "a directory":
                with contextlib.suppress(OSError):
                    path.unlink()  # removes a symlink itself, never its target
            return None
        artifact = decode_entry(key, data)
        if artifact is None:
            logger.warning("cuvil-dsl: removing damaged compile cache entry %s", path)
            with contextlib.suppress(OSError):
                path.unlink()
        return artifact

    def store(self, key: str, artifact: BuildArtifact) -> bool:
        """Write the entry; a full or read-only disk is logged once and otherwise ignored."""
        try:
            self.entries_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(self.path_for(key), encode_entry(key, artifact))
        except OSError as exc:
            if not self._warned_write:
                self._warned_write = True
                reason = "disk full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
                logger.warning(
                    "cuvil-dsl: cannot write the compile cache in %s (%s); compiling without it", self.root, reason
                )
            return False
        with _SWEPT_LOCK:  # the first store of a process also clears what killed writers left behind
            first = self.root not in _SWEPT
            _SWEPT.add(self.root)
        if first:
            removed = orphans(self.root, remove=True)
            if removed:
                logger.info("cuvil-dsl: removed %d temporary file(s) left in %s by killed writers", removed, self.root)
        return True

    @contextlib.contextmanager
    def key_lock(self, key: str, timeout: float) -> Iterator[bool]:
        """Hold ``locks/<key>.lock`` so only one process compiles a key; yields whether it is held.

        ``flock`` dies with its process, so a crashed compiler never blocks others; waiting
        gives up after ``timeout`` and compiles anyway rather than risk hanging forever.
        """
        try:
            self.locks_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            # O_NOFOLLOW: a symlink planted as a lock file must not make us create files elsewhere
            fd = os.open(self.locks_dir / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            yield False
            return
        try:
            deadline = time.monotonic() + timeout
            held = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = True
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.02)
            yield held
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def entries(self) -> list[Path]:
        try:
            return [p for p in self.entries_dir.iterdir() if p.name.endswith(ENTRY_SUFFIX)]
        except OSError:
            return []

    def clear(self) -> int:
        """Remove entries, lock files and saved failures; counters are history and stay."""
        removed = 0
        for folder in (self.entries_dir, self.locks_dir, self.failed_dir):
            try:
                children = list(folder.iterdir())
            except OSError:
                continue
            for child in children:
                with contextlib.suppress(OSError):
                    child.unlink()
                    removed += folder is self.entries_dir
        return removed


def _read_own_file(path: Path) -> bytes | str | None:
    """The bytes of ``path`` if it is a regular file owned by this user; None if it is absent;
    otherwise a short reason why it was not read ("a symlink", "a directory", ...)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink"
        if exc.errno == errno.EISDIR:
            return "a directory"
        return None  # unreadable now (permissions, a vanished folder): a miss
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return f"owned by uid {st.st_uid}, not by this user"
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    except OSError:
        return None
    finally:
        os.close(fd)


_open_lock = threading.Lock()
_opened: dict[Path, DiskCache | None] = {}
_refusals: dict[Path, str] = {}


def _check_directory(root: Path) -> str | None:
    """Why ``root`` cannot be trusted, or ``None`` when it can (creating it 0700 if absent)."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(root)
    except OSError as exc:
        return f"cannot create it ({exc.strerror or exc})"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"it is writable by group or others (mode {st.st_mode & 0o777:o}); run `chmod go-w {root}`"
    return None


def disk_cache() -> DiskCache | None:
    """The disk cache for the current ``CUVIL_CACHE_DIR``, or ``None`` when disabled or refused."""
    if knobs.values.disable_cache:
        return None
    root = knobs.values.cache_dir
    with _open_lock:
        if root not in _opened:
            problem = _check_directory(root)
            if problem is None:
                _opened[root] = DiskCache(root)
            else:
                _opened[root] = None
                _refusals[root] = problem
                warnings.warn(
                    f"cuvil-dsl: not using compile cache {root}: {problem}; compiling without a disk cache",
                    RuntimeWarning,
                    stacklevel=3,
                )
        return _opened[root]


def refusal(root: Path) -> str | None:
    """Why ``root`` was refused in this process, if it was."""
    with _open_lock:
        return _refusals.get(root)
