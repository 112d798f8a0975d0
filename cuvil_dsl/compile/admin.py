"""``cuvil-dsl cache info`` / ``cache clear``: what the compile cache holds and how it has been used."""

from __future__ import annotations

from cuvil_dsl import knobs
from cuvil_dsl.compile import log as clog
from cuvil_dsl.compile.breaker import BREAKER
from cuvil_dsl.compile.cache import MEMORY, disk_cache, orphans, refusal


def cache_info() -> dict:
    """Location, entry count and size, saved failures, and counters (cumulative across processes).

    This process's unsaved counts are written first, so the cumulative numbers include them.
    """
    root = knobs.values.cache_dir
    disk = disk_cache()
    entries = disk.entries() if disk else []
    size = 0
    for path in entries:
        try:
            size += path.stat().st_size
        except OSError:  # removed by another process meanwhile
            continue
    failed = 0
    if disk is not None:
        clog.persist_counters(root)
        try:
            failed = sum(1 for p in disk.failed_dir.iterdir() if p.suffix == ".cu")
        except OSError:
            failed = 0
    return {
        "dir": str(root),
        "enabled": disk is not None,
        "disabled_by_knob": bool(knobs.values.disable_cache),
        "refused": refusal(root),
        "entries": len(entries),
        "bytes": size,
        "failed_sources": failed,
        "memory_entries": len(MEMORY),
        "orphaned_temp_files": orphans(root, remove=False) if disk is not None else 0,
        "counters": clog.read_persisted(root) if disk is not None else clog.export_counters(),
        "process_counters": clog.export_counters(),
        "breaker": BREAKER.state(),
    }


def cache_clear(*, memory: bool = True, disk: bool = True) -> dict:
    """Drop the in-memory layer and/or the disk entries (with lock files and saved failures),
    the CPU backend's generated modules and numba's cache of them, the checked programs (``ir/``),
    the parser tables, and the temporary files killed writers left (``cache.orphans``)."""
    removed_memory = MEMORY.clear() if memory else 0
    removed_disk = 0
    if disk:
        cache = disk_cache()
        removed_disk = cache.clear() if cache else 0
        root = knobs.values.cache_dir
        if cache is not None:  # only a directory that passed the ownership checks
            removed_disk += orphans(root, remove=True)
            removed_disk += _remove_tree(root / "numba") + _remove_tree(root / "ir")
            parser_tables = root / "lark-cuvil.cache"
            if parser_tables.exists():
                parser_tables.unlink(missing_ok=True)
                removed_disk += 1
    return {"memory": removed_memory, "disk": removed_disk}


def _remove_tree(folder) -> int:
    import shutil

    if not folder.is_dir() or folder.is_symlink():
        return 0
    count = sum(1 for p in folder.rglob("*") if p.is_file())
    shutil.rmtree(folder, ignore_errors=True)
    return count
