"""The compile cache under faults the existing suite does not cover.

Already covered in ``tests/compile/test_compile_cache.py`` (not repeated here): damaged,
truncated and bit-flipped entries are verified and rejected before loading
(``test_damaged_entry_is_a_miss_and_gets_repaired``, ``test_any_truncation_or_bit_flip_is_rejected``),
read-only and full directories, group-writable and foreign-owned cache *directories*, eight
threads and two processes on one key.

Here: a writer killed with SIGKILL between writing and renaming (deterministic, and at random
moments of a real compile loop), foreign things under an entry's name (a symlink, a file of
another user, a directory, a FIFO; ``cubin/`` and ``locks/`` replaced by files), and 4
processes x 32 threads on one key.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hardening_support import ROOT

from cuvil_dsl.compile import CompileUnit, cache_clear, compile_units
from cuvil_dsl.compile import cache as cache_mod
from cuvil_dsl.compile.units import BuildArtifact, KernelResources

pytestmark = pytest.mark.nvrtc

KERNEL = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * s + 1.0f;
}
"""


def unit(tag: str) -> CompileUnit:
    return CompileUnit(f"scale_{tag}", KERNEL.replace("1.0f", f"1.0f /* {tag} */"), ("scale",))



def _env(root: Path) -> dict:
    return {**os.environ, "CUVIL_CACHE_DIR": str(root),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _assert_every_entry_valid(root: Path) -> int:
    """Every ``*.entry`` decodes for its own key; returns how many there are."""
    found = sorted((root / "cubin").glob("*.entry"))
    for entry in found:
        key = entry.name.removesuffix(".entry")
        assert cache_mod.decode_entry(key, entry.read_bytes()) is not None, f"partial or foreign entry {entry}"
    return len(found)


def _artifact(size: int) -> BuildArtifact:
    cubin = b"\x7fELF" + os.urandom(size)
    return BuildArtifact(cubin, {"scale": KernelResources("scale", 10)}, "log", "nvrtc", "13.0", 1.0)


# ---------------------------------------------------------------------------- killed writers
KILLED_BETWEEN_WRITE_AND_RENAME = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from cuvil_dsl.compile import cache as cache_mod
    from cuvil_dsl.compile.units import BuildArtifact, KernelResources

    marker = Path(sys.argv[1])
    real_fsync = os.fsync

    def fsync_then_hang(fd):
        real_fsync(fd)          # every byte is written and flushed...
        marker.write_text("written")
        time.sleep(60)          # ...and the rename never comes: the parent kills us here

    cache_mod.os.fsync = fsync_then_hang
    disk = cache_mod.disk_cache()
    artifact = BuildArtifact(b"\\x7fELF" + b"\\xab" * (8 << 20), {"scale": KernelResources("scale", 10)},
                             "log", "nvrtc", "13.0", 1.0)
    disk.store("k" * 64, artifact)
""")


def test_sigkill_between_write_and_rename_leaves_nothing_loadable(cache_dir, tmp_path):
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", KILLED_BETWEEN_WRITE_AND_RENAME, str(marker)],
                             env=_env(cache_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "the writer never reached the rename"
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    leftovers = list((cache_dir / "cubin").glob(".*.tmp"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 8 << 20  # the whole entry, under a temporary name
    assert not list((cache_dir / "cubin").glob("*.entry"))
    disk = cache_mod.disk_cache()
    assert disk.load("k" * 64) is None  # a temporary file is never an entry
    # the next writer of the key is not disturbed by the leftover
    assert disk.store("k" * 64, _artifact(100))
    assert disk.load("k" * 64) is not None and _assert_every_entry_valid(cache_dir) == 1


RANDOM_WRITER = textwrap.dedent("""
    import os, sys
    from cuvil_dsl.compile import cache as cache_mod
    from cuvil_dsl.compile.units import BuildArtifact, KernelResources

    disk = cache_mod.disk_cache()
    print("ready", flush=True)
    i = 0
    while True:  # large entries, so a kill often lands inside a write
        size = (1 + i % 4) << 20
        artifact = BuildArtifact(b"\\x7fELF" + os.urandom(size), {"scale": KernelResources("scale", 10)},
                                 "log", "nvrtc", "13.0", 1.0)
        disk.store(f"{i % 7:064d}", artifact)
        i += 1
""")


def test_sigkill_at_random_moments_of_a_writing_process(cache_dir):
    """Kill a process that keeps rewriting seven keys at ten random moments: each time, every
    file under an entry's name is a complete entry for its key."""
    import random

    rnd = random.Random(1)
    for _ in range(10):
        child = subprocess.Popen([sys.executable, "-c", RANDOM_WRITER], env=_env(cache_dir),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert child.stdout.readline().strip() == b"ready", child.stderr.read().decode()
            time.sleep(rnd.uniform(0.0, 0.3))
            os.kill(child.pid, signal.SIGKILL)
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        _assert_every_entry_valid(cache_dir)
    disk = cache_mod.disk_cache()
    for i in range(7):
        key = f"{i:064d}"
        loaded = disk.load(key)
        assert loaded is None or loaded.cubin.startswith(b"\x7fELF")


COMPILING_CHILD = textwrap.dedent("""
    from cuvil_dsl.compile import CompileUnit, compile_units
    KERNEL = %r
    units = [CompileUnit(f"scale_kill{i}", KERNEL.replace("1.0f", f"1.0f /* kill{i} */"), ("scale",)) for i in range(40)]
    print("ready", flush=True)
    compile_units(units, "sm_90", workers=2)
""") % KERNEL


def test_sigkill_during_a_real_compile_batch(cache_dir):
    """A process compiling 40 units is killed mid-batch; the next process finds only complete
    entries, compiles the rest, and gets the same binaries as a cold compile."""
    child = subprocess.Popen([sys.executable, "-c", COMPILING_CHILD], env=_env(cache_dir),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready", child.stderr.read().decode()
        deadline = time.monotonic() + 90
        while len(list((cache_dir / "cubin").glob("*.entry"))) < 3 and time.monotonic() < deadline:
            assert child.poll() is None, child.stderr.read().decode()
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    survived = _assert_every_entry_valid(cache_dir)
    assert 3 <= survived < 40
    units = [CompileUnit(f"scale_kill{i}", KERNEL.replace("1.0f", f"1.0f /* kill{i} */"), ("scale",)) for i in range(40)]
    results = compile_units(units, "sm_90", workers=2)
    assert sum(r.cache == "hit-disk" for r in results) == survived
    assert _assert_every_entry_valid(cache_dir) == 40
    assert all(r.cubin.startswith(b"\x7fELF") for r in results)


# ---------------------------------------------------------------------------- foreign files
def _entry_path(u: CompileUnit) -> tuple[Path, str]:
    first = compile_units([u], "sm_90")[0]
    cache_clear(disk=False)  # forget the in-memory copy: the next request reads the disk
    return cache_mod.disk_cache().path_for(first.key), first.key


def test_symlink_planted_as_an_entry_is_not_followed(cache_dir, tmp_path):
    """A symlink under an entry's name, even one pointing at a perfectly valid entry for the
    same key, is not something ``store`` wrote: it is removed (its target untouched) and the
    unit is compiled again."""
    u = unit("symlink")
    path, key = _entry_path(u)
    outside = tmp_path / "outside.entry"
    original = path.read_bytes()
    outside.write_bytes(original)
    path.unlink()
    path.symlink_to(outside)
    result = compile_units([u], "sm_90")[0]
    assert result.cache == "miss"
    assert not path.is_symlink() and path.is_file()
    assert outside.read_bytes() == original  # the target was neither read as ours nor changed
    assert _assert_every_entry_valid(cache_dir) == 1


def test_symlink_to_a_sensitive_file_is_never_read(cache_dir):
    u = unit("passwd")
    path, _ = _entry_path(u)
    path.unlink()
    path.symlink_to("/etc/passwd")
    before = Path("/etc/passwd").read_bytes()
    assert compile_units([u], "sm_90")[0].cache == "miss"
    assert Path("/etc/passwd").read_bytes() == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_entry_owned_by_another_user_is_not_loaded(cache_dir):
    """A valid entry owned by someone else (only root can make one here) is refused."""
    u = unit("foreign_uid")
    path, key = _entry_path(u)
    os.chown(path, 65534, 65534)
    assert cache_mod.disk_cache().load(key) is None
    result = compile_units([u], "sm_90")[0]
    assert result.cache == "miss" and path.stat().st_uid == os.getuid()


def test_directory_where_an_entry_should_be(cache_dir):
    """The compile still succeeds (without caching that key), and the directory is left alone."""
    u = unit("dir_entry")
    path, _ = _entry_path(u)
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("not ours to delete")
    for _ in range(2):
        result = compile_units([u], "sm_90")[0]
        assert result.cubin.startswith(b"\x7fELF")
        cache_clear(disk=False)
    assert (path / "inside").exists()


def test_fifo_where_an_entry_should_be_does_not_block(cache_dir):
    u = unit("fifo")
    path, _ = _entry_path(u)
    path.unlink()
    os.mkfifo(path)
    started = time.monotonic()
    assert compile_units([u], "sm_90")[0].cache == "miss"  # opening a FIFO for reading would block for ever
    assert time.monotonic() - started < 30
    assert path.is_file() and _assert_every_entry_valid(cache_dir) == 1


@pytest.mark.parametrize("folder", ["cubin", "locks"])
def test_a_file_where_a_cache_folder_should_be(cache_dir, folder):
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (cache_dir / folder).write_text("planted")
    u = unit(f"file_for_{folder}")
    for _ in range(2):
        assert compile_units([u], "sm_90")[0].cubin.startswith(b"\x7fELF")
        cache_clear(disk=False)
    assert (cache_dir / folder).read_text() == "planted"


def test_symlinked_lock_file_is_not_followed(cache_dir, tmp_path):
    u = unit("lock_link")
    path, key = _entry_path(u)
    path.unlink()
    victim = tmp_path / "victim"
    lock = cache_dir / "locks" / f"{key}.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    assert compile_units([u], "sm_90")[0].cache == "miss"
    assert not victim.exists()  # O_NOFOLLOW: the lock did not create a file at the link's target


# ---------------------------------------------------------------------------- contention
def _hammer(root: str, barrier, threads: int) -> list[bytes]:
    import threading

    os.environ["CUVIL_CACHE_DIR"] = root
    from cuvil_dsl.compile import compile_units as compile_in_child

    target = unit("hammer")
    results: list = [None] * threads
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        start.wait()
        results[i] = compile_in_child([target], "sm_90")[0].cubin

    barrier.wait()
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return results


def test_four_processes_of_32_threads_on_one_key(cache_dir):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(4)
    with ctx.Pool(4) as pool:
        per_process = pool.starmap(_hammer, [(str(cache_dir), barrier, 32)] * 4)
    cubins = {c for results in per_process for c in results}
    assert len(cubins) == 1 and None not in cubins and next(iter(cubins)).startswith(b"\x7fELF")
    assert _assert_every_entry_valid(cache_dir) == 1
    assert not list((cache_dir / "cubin").glob(".*.tmp"))
    import json

    counters = json.loads((cache_dir / "counters.json").read_text())
    assert counters["compiles"] == 1, counters  # one NVRTC compile for 128 requests in 4 processes
