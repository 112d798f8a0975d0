"""Circuit breaker: stop asking NVRTC after it keeps failing, and use nvcc for a while.

When libnvrtc is out of memory or broken, every compile would first pay for a failing NVRTC
attempt and then for nvcc. After ``CUVIL_BREAKER_THRESHOLD`` NVRTC failures within
``CUVIL_BREAKER_WINDOW`` seconds the breaker opens and compiles go straight to nvcc for
``CUVIL_BREAKER_COOLDOWN`` seconds; then NVRTC gets another chance.

Only failures of NVRTC itself count (a resource ``nvrtcResult`` code). A kernel that needs
more shared memory than the GPU has fails under every compiler and says nothing about
NVRTC's health, so it does not open the breaker. State is per process.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

from cuvil_dsl import knobs


class CircuitBreaker:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._failures: deque[float] = deque()
        self._open_until: float | None = None

    def record_failure(self) -> bool:
        """Count one NVRTC failure; returns True when this one opened the breaker."""
        now = self.clock()
        window = knobs.values.breaker_window
        threshold = knobs.values.breaker_threshold
        with self._lock:
            self._failures.append(now)
            while self._failures and self._failures[0] < now - window:
                self._failures.popleft()
            if len(self._failures) >= threshold and not self._is_open(now):
                self._open_until = now + knobs.values.breaker_cooldown
                self._failures.clear()
                return True
            return False

    def is_open(self) -> bool:
        """True while NVRTC should be skipped; the first call after the cooldown closes it."""
        now = self.clock()
        with self._lock:
            return self._is_open(now)

    def _is_open(self, now: float) -> bool:
        if self._open_until is None:
            return False
        if now < self._open_until:
            return True
        self._open_until = None
        return False

    def state(self) -> dict:
        now = self.clock()
        with self._lock:
            is_open = self._is_open(now)
            return {
                "open": is_open,
                "seconds_left": round(self._open_until - now, 3) if is_open and self._open_until else 0.0,
                "recent_failures": len(self._failures),
            }

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
            self._open_until = None


BREAKER = CircuitBreaker()
