"""The last line of defence against a hung case: a thread timer that does not need signals to
reach Python. pytest-timeout stops a case stuck in Python code (``--case-timeout``); a case stuck
in native code that blocks or never checks signals (a driver call, a spin in C) defeats it. The
watchdog fires a grace period later, records the case as ``timeout`` from its own thread, and
ends the process: under xdist the controller then replaces the worker and the run goes on."""
from __future__ import annotations

import os
import threading
from typing import Callable

#: Exit status of a process the watchdog ended (distinct from a crash's signal).
EXIT_STATUS = 86


def grace(timeout_s: float) -> float:
    """How long after --case-timeout the watchdog fires: pytest-timeout gets the first chance.
    A fifth of the timeout, at least 3 s (a Python-level stop by pytest-timeout unwinds in well
    under a second; the floor only matters for the very short timeouts tests use)."""
    return max(3.0, 0.2 * timeout_s)


class Watchdog:
    def __init__(self, on_expire: Callable[[object, float], None], exit: Callable[[int], None] = os._exit):
        self._on_expire = on_expire
        self._exit = exit
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self, item, seconds: float) -> None:
        self.disarm()
        timer = threading.Timer(seconds, self._fire, args=(item, seconds))
        timer.daemon = True
        with self._lock:
            self._timer = timer
        timer.start()

    def disarm(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _fire(self, item, seconds: float) -> None:
        with self._lock:
            if self._timer is None:
                return  # disarmed while the timer thread was waking up
        try:
            self._on_expire(item, seconds)
        finally:
            self._exit(EXIT_STATUS)
