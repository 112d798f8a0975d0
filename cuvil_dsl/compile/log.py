"""One JSON record per compile request, and the counters behind ``cuvil-dsl cache info``.

Records go to ``CUVIL_COMPILE_LOG`` (empty: nowhere; ``stderr``; or a file, appended one
JSON object per line) and to any in-process sinks, which is how tests and the CLI watch
compiles without parsing text. File appends use ``O_APPEND`` and one ``write`` per record,
so lines from several processes do not interleave.

Counters are per process; :func:`persist_counters` adds what accumulated since the last
call to ``counters.json`` in the cache directory under an ``flock``, so concurrent
processes never lose each other's counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from cuvil_dsl import knobs
from cuvil_dsl.compile.cache import atomic_write

Record = dict
Sink = Callable[[Record], None]

LATENCY_BUCKETS_MS: tuple[float, ...] = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, math.inf)
COUNTER_NAMES = ("compiles", "memory_hits", "disk_hits", "fallbacks", "failures")
COUNTERS_FILE = "counters.json"

_sinks: list[Sink] = []
_sinks_lock = threading.Lock()
_write_lock = threading.Lock()


def add_sink(sink: Sink) -> None:
    with _sinks_lock:
        _sinks.append(sink)


def remove_sink(sink: Sink) -> None:
    with _sinks_lock:
        _sinks.remove(sink)


@contextlib.contextmanager
def capture() -> Iterator[list[Record]]:
    """Collect every record emitted inside the ``with`` block (all threads) into a list."""
    records: list[Record] = []
    lock = threading.Lock()

    def sink(record: Record) -> None:
        with lock:
            records.append(record)

    add_sink(sink)
    try:
        yield records
    finally:
        remove_sink(sink)


def wanted() -> bool:
    """Whether a record would go anywhere (a sink is listening or CUVIL_COMPILE_LOG is set):
    callers on hot paths (in-process cache hits) skip building records nobody reads."""
    return bool(_sinks) or bool(knobs.values.compile_log)


def emit(record: Record) -> None:
    """Stamp ``record`` with an ISO 8601 UTC time and hand it to every sink."""
    record = {"timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), **record}
    with _sinks_lock:
        sinks = list(_sinks)
    for sink in sinks:
        sink(record)
    target = knobs.values.compile_log
    if not target:
        return
    line = json.dumps(record, separators=(",", ":")) + "\n"
    with _write_lock:
        if target == "stderr":
            sys.stderr.write(line)
            sys.stderr.flush()
            return
        try:
            fd = os.open(os.path.expanduser(target), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            sys.stderr.write(f"cuvil-dsl: cannot append to CUVIL_COMPILE_LOG={target}: {exc}\n")


def _empty() -> dict:
    return {
        **{name: 0 for name in COUNTER_NAMES},
        "latency_ms_buckets": [0] * len(LATENCY_BUCKETS_MS),
        "latency_ms_sum": 0.0,
    }


class Counters:
    """Thread-safe counts plus a fixed-bucket histogram of real compile latencies (misses only,
    so memory hits do not drown the distribution)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = _empty()
        self._unsaved = _empty()

    def add(self, name: str, latency_ms: float | None = None) -> None:
        with self._lock:
            for bucket in (self._total, self._unsaved):
                bucket[name] += 1
                if latency_ms is not None:
                    index = next(i for i, edge in enumerate(LATENCY_BUCKETS_MS) if latency_ms <= edge)
                    bucket["latency_ms_buckets"][index] += 1
                    bucket["latency_ms_sum"] += latency_ms

    def snapshot(self) -> dict:
        with self._lock:
            return json.loads(json.dumps(self._total))

    def take_unsaved(self) -> dict:
        with self._lock:
            unsaved, self._unsaved = self._unsaved, _empty()
            return unsaved

    def give_back(self, unsaved: dict) -> None:
        """Return counts that could not be saved, so the next attempt includes them."""
        with self._lock:
            _merge(self._unsaved, unsaved)

    def reset(self) -> None:
        with self._lock:
            self._total = _empty()
            self._unsaved = _empty()


COUNTERS = Counters()


def _merge(into: dict, extra: dict) -> dict:
    for name in COUNTER_NAMES:
        into[name] = int(into.get(name, 0)) + int(extra.get(name, 0))
    buckets = list(into.get("latency_ms_buckets") or [0] * len(LATENCY_BUCKETS_MS))
    more = extra.get("latency_ms_buckets") or []
    if len(buckets) != len(LATENCY_BUCKETS_MS):  # written by a version with other buckets: start over
        buckets = [0] * len(LATENCY_BUCKETS_MS)
    for i, count in enumerate(more[: len(buckets)]):
        buckets[i] += int(count)
    into["latency_ms_buckets"] = buckets
    into["latency_ms_sum"] = float(into.get("latency_ms_sum", 0.0)) + float(extra.get("latency_ms_sum", 0.0))
    return into


def export_counters() -> dict:
    """This process's counters (``latency_ms_buckets`` counts per bucket, edges in ``latency_ms_le``)."""
    edges = [f"{edge:g}" if edge != math.inf else "+Inf" for edge in LATENCY_BUCKETS_MS]
    return {**COUNTERS.snapshot(), "latency_ms_le": edges}


def read_persisted(root: Path) -> dict:
    """Cumulative counters saved in ``root``; a missing or unreadable file counts as zero."""
    try:
        data = json.loads((root / COUNTERS_FILE).read_text(encoding="utf-8"))
        return _merge(_empty(), data if isinstance(data, dict) else {})
    except (OSError, ValueError, TypeError):
        return _empty()


def persist_counters(root: Path) -> bool:
    """Add this process's unsaved counts to ``root/counters.json``; on any OSError keep them for later."""
    unsaved = COUNTERS.take_unsaved()
    if not any(unsaved[name] for name in COUNTER_NAMES):
        return True
    try:
        fd = os.open(root / "counters.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            merged = _merge(read_persisted(root), unsaved)
            atomic_write(root / COUNTERS_FILE, json.dumps(merged, indent=1).encode("utf-8"), durable=False)
        finally:
            os.close(fd)
    except OSError:
        COUNTERS.give_back(unsaved)
        return False
    return True


def prometheus_text(counters: dict | None = None) -> str:
    """Counters in the Prometheus text exposition format (counters and one histogram)."""
    data = counters if counters is not None else COUNTERS.snapshot()
    lines: list[str] = []
    for name in COUNTER_NAMES:
        metric = f"cuvil_compile_{name}_total"
        lines += [f"# TYPE {metric} counter", f"{metric} {int(data[name])}"]
    lines.append("# TYPE cuvil_compile_latency_ms histogram")
    running = 0
    for edge, count in zip(LATENCY_BUCKETS_MS, data["latency_ms_buckets"]):
        running += int(count)
        le = "+Inf" if edge == math.inf else f"{edge:g}"
        lines.append(f'cuvil_compile_latency_ms_bucket{{le="{le}"}} {running}')
    lines.append(f"cuvil_compile_latency_ms_sum {float(data['latency_ms_sum']):.3f}")
    lines.append(f"cuvil_compile_latency_ms_count {running}")
    return "\n".join(lines) + "\n"
