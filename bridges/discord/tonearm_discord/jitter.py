"""A small jitter buffer between the Router's WebSocket and discord.py's player thread.

The Router paces packets at 20 ms, but they cross a network and an event loop before the
player thread asks for them, itself on its own 20 ms clock. Handing packets on as they arrive
makes Discord's clock follow the network's (bursts after every hiccup); this buffer lets the
player read one packet per tick without ever waiting:

* playback starts once ``start_packets`` have arrived (60 ms by default);
* a read that finds the buffer empty gets a silence frame (``F8 FF FE``) and the buffer waits
  for ``start_packets`` again, so one late packet does not become a run of single-packet gaps;
* when more than ``cap_packets`` are waiting (the two clocks drifted, or a stall delivered a
  burst), the oldest are dropped down to ``start_packets``: the listener hears the present;
* ``read()`` never blocks for longer than it takes to take a lock.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

#: One Opus frame of silence, as Discord expects between and after transmissions.
SILENCE = b"\xf8\xff\xfe"


@dataclass
class JitterStats:
    received: int = 0
    played: int = 0
    #: Reads answered with silence while playing (the buffer ran dry).
    underruns: int = 0
    #: Packets dropped because the backlog passed the cap.
    shed: int = 0


class JitterBuffer:
    def __init__(self, start_packets: int = 3, cap_packets: int = 10) -> None:
        if not 1 <= start_packets <= cap_packets:
            raise ValueError("need 1 <= start_packets <= cap_packets")
        self.start_packets = start_packets
        self.cap_packets = cap_packets
        self._packets: deque[bytes] = deque()
        self._lock = threading.Lock()
        self._filling = True
        self.stats = JitterStats()

    def push(self, packet: bytes) -> None:
        """Adds a packet from the Router (any thread)."""
        with self._lock:
            self._packets.append(packet)
            self.stats.received += 1
            if len(self._packets) > self.cap_packets:
                while len(self._packets) > self.start_packets:
                    self._packets.popleft()
                    self.stats.shed += 1
            if self._filling and len(self._packets) >= self.start_packets:
                self._filling = False

    def read(self) -> bytes:
        """The next packet, or silence while filling or on underrun (the player thread)."""
        with self._lock:
            if self._filling:
                return SILENCE
            if not self._packets:
                self._filling = True
                self.stats.underruns += 1
                return SILENCE
            self.stats.played += 1
            return self._packets.popleft()

    def clear(self) -> None:
        """Forgets what is waiting (a stop, a new track, a reconnection)."""
        with self._lock:
            self._packets.clear()
            self._filling = True

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._packets)
