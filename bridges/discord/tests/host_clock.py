"""Discord's 20 ms clock, and the host's own as a ceiling for it.

discord.py's ``AudioPlayer`` sends the n-th packet at start + n × 20 ms: a late wake shortens the
next sleep, so one late packet does not move the rest. ``lateness`` measures each packet against
that grid. ``HostClock`` is a thread that keeps the same schedule and does nothing else; beside
the player, in the same process, it shows how late this host wakes a Python thread at that
moment, so a test can tell what the bridge adds to Discord's clock from what the machine takes
from it."""

from __future__ import annotations

import threading
import time

FRAME = 0.020


class HostClock:
    def __init__(self) -> None:
        self.ticks: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-clock", daemon=True)

    def __enter__(self) -> "HostClock":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        start = time.perf_counter()
        loops = 0
        while not self._stop.is_set():
            self.ticks.append(time.perf_counter())
            loops += 1
            time.sleep(max(0.0, start + FRAME * loops - time.perf_counter()))


def lateness(times: list[float]) -> list[float]:
    """How late each of ``times`` is on a 20 ms grid laid through the earliest of them."""
    if not times:
        return []
    grid = min(t - FRAME * i for i, t in enumerate(times))
    return [t - FRAME * i - grid for i, t in enumerate(times)]


def time_reads(source) -> list[float]:
    """Records how long each ``source.read()`` takes from now on: the bridge's own part of every
    tick of discord.py's player thread."""
    durations: list[float] = []
    read = source.read

    def timed() -> bytes:
        start = time.perf_counter()
        try:
            return read()
        finally:
            durations.append(time.perf_counter() - start)

    source.read = timed
    return durations
