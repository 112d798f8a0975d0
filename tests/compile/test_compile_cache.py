"""Compile cache: memory and disk layers, damaged entries, unsafe or read-only directories,
key contents, single flight across threads and processes, counters."""

from __future__ import annotations

import errno
import json
import logging
import multiprocessing
import os
import stat
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil_dsl.compile import (
    CompileUnit,
    cache_clear,
    cache_info,
    capture,
    compile_units,
    export_counters,
    prometheus_text,
)
from cuvil_dsl.compile import cache as cache_mod
from cuvil_dsl.compile import nvrtc as nvrtc_mod
from cuvil_dsl.compile.units import BuildArtifact, KernelResources

pytestmark = pytest.mark.nvrtc

KERNEL = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * s + 1.0f;
}
"""


def unit(tag: str = "a") -> CompileUnit:
    return CompileUnit(f"scale_{tag}", KERNEL.replace("1.0f", f"1.0f /* {tag} */"), ("scale",))



def entries(root):
    return sorted((root / "cubin").glob("*.entry"))


def test_memory_then_disk_hit(cache_dir):
    u = unit()
    with capture() as records:
        first = compile_units([u], "sm_90")[0]
        second = compile_units([u], "sm_90")[0]
        cache_clear(disk=False)  # a fresh process would start with an empty memory layer
        third = compile_units([u], "sm_90")[0]
    assert [r["cache"] for r in records] == ["miss", "hit-memory", "hit-disk"]
    assert (first.cache_hit, second.cache_hit, third.cache_hit) == (False, True, True)
    assert first.cubin == second.cubin == third.cubin
    assert first.resources == third.resources and first.log == third.log
    assert first.key == third.key and len(entries(cache_dir)) == 1
    assert second.compile_ms < 5 and third.compile_ms < first.compile_ms
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o700


def _damage_truncate(path, other):
    path.write_bytes(path.read_bytes()[:-10])


def _damage_flip(path, other):
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage_foreign(path, other):
    path.write_bytes(b"not a cache entry at all" * 10)


def _damage_header_only(path, other):
    path.write_bytes(path.read_bytes()[:20])


def _damage_other_key(path, other):
    path.write_bytes(other.read_bytes())  # a complete, valid entry, but for another key


@pytest.mark.parametrize(
    "damage", [_damage_truncate, _damage_flip, _damage_foreign, _damage_header_only, _damage_other_key]
)
def test_damaged_entry_is_a_miss_and_gets_repaired(cache_dir, damage, caplog):
    good, other = unit("good"), unit("other")
    original = compile_units([good], "sm_90")[0]
    compile_units([other], "sm_90")
    path = cache_mod.DiskCache(cache_dir).path_for(original.key)
    other_path = cache_mod.DiskCache(cache_dir).path_for(compile_units([other], "sm_90")[0].key)
    damage(path, other_path)
    cache_clear(disk=False)
    with caplog.at_level(logging.WARNING, logger="cuvil_dsl.compile"), capture() as records:
        again = compile_units([good], "sm_90")[0]
    assert records[0]["cache"] == "miss"
    assert again.cubin == original.cubin
    assert "damaged" in caplog.text
    assert cache_mod.decode_entry(original.key, path.read_bytes()) is not None
    cache_clear(disk=False)
    assert compile_units([good], "sm_90")[0].cache == "hit-disk"


def test_entry_round_trip_and_rejections():
    resources = {"k": KernelResources("k", 10, 1, 2, 3, 4, 5)}
    artifact = BuildArtifact(b"\x7fELF" + b"\x00" * 60, resources, "log", "nvrtc", "13.0", 12.5, 0, None)
    data = cache_mod.encode_entry("abc", artifact)
    assert cache_mod.decode_entry("abc", data) == artifact
    assert cache_mod.decode_entry("abd", data) is None
    not_elf = BuildArtifact(b"junk" * 16, {}, "", "nvrtc", "13.0", 1.0)
    assert cache_mod.decode_entry("abc", cache_mod.encode_entry("abc", not_elf)) is None
    assert cache_mod.decode_entry("abc", b"") is None


_SAMPLE = cache_mod.encode_entry(
    "k" * 64,
    BuildArtifact(b"\x7fELF" + bytes(range(256)), {"k": KernelResources("k", 10)}, "log", "nvrtc", "13.0", 1.0),
)


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(0, len(_SAMPLE) - 1), flip=st.integers(0, len(_SAMPLE) - 1), bit=st.integers(0, 7))
def test_any_truncation_or_bit_flip_is_rejected(cut, flip, bit):
    assert cache_mod.decode_entry("k" * 64, _SAMPLE[:cut]) is None
    damaged = bytearray(_SAMPLE)
    damaged[flip] ^= 1 << bit
    assert cache_mod.decode_entry("k" * 64, bytes(damaged)) is None


def test_disk_write_failure_still_compiles(cache_dir, monkeypatch, caplog):
    def full_disk(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_mod, "atomic_write", full_disk)
    with caplog.at_level(logging.WARNING, logger="cuvil_dsl.compile"):
        results = compile_units([unit("x"), unit("y")], "sm_90")
    assert all(r.cubin.startswith(b"\x7fELF") for r in results)
    assert caplog.text.count("cannot write the compile cache") == 1
    assert entries(cache_dir) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_cache_dir_still_compiles(cache_dir):
    cache_dir.mkdir(mode=0o700)
    (cache_dir / "cubin").mkdir(mode=0o500)
    os.chmod(cache_dir, 0o500)
    try:
        assert compile_units([unit("ro")], "sm_90")[0].cubin.startswith(b"\x7fELF")
    finally:
        os.chmod(cache_dir, 0o700)


def test_group_writable_dir_is_refused(cache_dir):
    cache_dir.mkdir(mode=0o700)
    os.chmod(cache_dir, 0o777)
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        result = compile_units([unit("open")], "sm_90")[0]
    assert result.cubin.startswith(b"\x7fELF")
    assert not (cache_dir / "cubin").exists()
    info = cache_info()
    assert info["enabled"] is False and "writable" in info["refused"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another user")
def test_dir_owned_by_someone_else_is_refused(cache_dir):
    cache_dir.mkdir(mode=0o700)
    os.chown(cache_dir, 65534, 65534)
    with pytest.warns(RuntimeWarning, match="owned by uid 65534"):
        assert compile_units([unit("other_owner")], "sm_90")[0].cubin.startswith(b"\x7fELF")
    assert not (cache_dir / "cubin").exists()


def test_disable_cache_knob(cache_dir, monkeypatch):
    monkeypatch.setenv("CUVIL_DISABLE_CACHE", "1")
    compile_units([unit("nodisk")], "sm_90")
    assert not cache_dir.exists()


def test_key_covers_options_in_order_arch_and_knobs(cache_dir, monkeypatch):
    u = unit("key")
    key = lambda **kw: compile_units([u], kw.pop("arch", "sm_90"), **kw)[0].key  # noqa: E731
    base = key()
    assert key(options=("-DA=1", "-DB=2")) != key(options=("-DB=2", "-DA=1"))
    assert key(fast_math=True) != base
    assert key(arch="sm_80") != base
    assert compile_units([CompileUnit("other_name", u.source, u.kernels)], "sm_90")[0].key != base
    monkeypatch.setenv("CUVIL_LINEINFO", "1")
    lineinfo = compile_units([u], "sm_90")[0]
    assert lineinfo.key != base and lineinfo.cache == "miss"
    monkeypatch.delenv("CUVIL_LINEINFO")
    assert key() == base


def test_single_flight_eight_threads_one_compile(cache_dir, monkeypatch):
    calls = []
    real = nvrtc_mod.compile_cubin

    def slow_counting(*args):
        calls.append(threading.get_ident())
        time.sleep(0.3)  # keep the first compile in flight while the others arrive
        return real(*args)

    monkeypatch.setattr(nvrtc_mod, "compile_cubin", slow_counting)
    u = unit("flight")
    start = threading.Barrier(8)
    results = [None] * 8

    def worker(i):
        start.wait()
        results[i] = compile_units([u], "sm_90")[0]

    with capture() as records:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(calls) == 1
    assert sorted(r["cache"] for r in records) == ["hit-memory"] * 7 + ["miss"]
    assert len({r.cubin for r in results}) == 1


def _compile_in_child(root: str, barrier) -> bytes:
    os.environ["CUVIL_CACHE_DIR"] = root
    barrier.wait()
    return compile_units([unit("two_procs")], "sm_90")[0].cubin


def test_two_processes_share_one_entry(cache_dir):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(2)
    with ctx.Pool(2) as pool:
        cubins = pool.starmap(_compile_in_child, [(str(cache_dir), barrier)] * 2)
    assert cubins[0] == cubins[1] and cubins[0].startswith(b"\x7fELF")
    [entry] = entries(cache_dir)
    key = entry.name.removesuffix(".entry")
    assert cache_mod.decode_entry(key, entry.read_bytes()).cubin == cubins[0]
    assert not list((cache_dir / "cubin").glob(".*.tmp"))
    counters = json.loads((cache_dir / "counters.json").read_text())
    assert counters["compiles"] == 1 and counters["disk_hits"] == 1


def test_counters_info_clear_and_prometheus(cache_dir):
    before = export_counters()
    u, v = unit("c1"), unit("c2")
    compile_units([u, v], "sm_90")
    compile_units([u], "sm_90")
    after = export_counters()
    assert after["compiles"] - before["compiles"] == 2
    assert after["memory_hits"] - before["memory_hits"] == 1
    assert sum(after["latency_ms_buckets"]) - sum(before["latency_ms_buckets"]) == 2
    info = cache_info()
    assert info["dir"] == str(cache_dir) and info["enabled"] and info["entries"] == 2 and info["bytes"] > 0
    assert info["counters"]["compiles"] >= 2 and info["counters"]["memory_hits"] >= 1
    text = prometheus_text(info["counters"])
    assert "cuvil_compile_compiles_total" in text and 'cuvil_compile_latency_ms_bucket{le="+Inf"}' in text
    assert cache_clear() == {"memory": 2, "disk": 2}
    assert cache_info()["entries"] == 0
    assert compile_units([u], "sm_90")[0].cache == "miss"


def test_temp_files_of_killed_writers_are_swept(cache_dir, monkeypatch):
    """A writer killed between its write and its rename leaves ``.NAME.XXXX.tmp`` behind. The first store
    of a later process removes those untouched for an hour in the cache's folders; a younger one (its
    writer may still be at work), a symlink and anything nested deeper stay. ``cache info`` counts them,
    ``cache clear`` removes them."""
    from cuvil_dsl.cli import format_cache_info

    compile_units([unit("o1")], "sm_90")  # the folders exist now; this process has swept its root
    old = time.time() - 2 * cache_mod.ORPHAN_AGE_S

    def temp(path, age=old):
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.write_bytes(b"half an entry")
        os.utime(path, (age, age))
        return path

    stale = [temp(cache_dir / "cubin" / ".k.entry.a1b2.tmp"), temp(cache_dir / ".counters.json.c3.tmp"),
             temp(cache_dir / "ir" / ".e5.pickle.d4.tmp")]
    young = temp(cache_dir / "cubin" / ".k.entry.f6.tmp", age=time.time() - 60)
    nested = temp(cache_dir / "cubin" / "deeper" / ".k.entry.g7.tmp")
    target = temp(cache_dir / "kept.bin")
    link = cache_dir / "cubin" / ".k.entry.h8.tmp"
    link.symlink_to(target)
    os.utime(link, (old, old), follow_symlinks=False)
    info = cache_info()
    assert info["orphaned_temp_files"] == 3
    assert "temp files  3 left by killed writers" in format_cache_info(info)

    compile_units([unit("o2")], "sm_90")  # swept once per process: nothing happens at this store
    assert all(p.exists() for p in stale)
    monkeypatch.setattr(cache_mod, "_SWEPT", set())  # a later process
    compile_units([unit("o3")], "sm_90")
    assert not any(p.exists() for p in stale)
    assert young.exists() and nested.exists() and link.is_symlink() and target.read_bytes() == b"half an entry"
    assert cache_info()["orphaned_temp_files"] == 0 and "temp files" not in format_cache_info(cache_info())

    late = temp(cache_dir / ".durations.json.i9.tmp")
    cache_clear()
    assert not late.exists() and target.exists()
