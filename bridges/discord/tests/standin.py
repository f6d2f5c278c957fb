"""A stand-in for discord.py's VoiceClient: what the real `AudioPlayer` thread needs of one, with
every packet recorded with the time it was handed over, and every speaking change."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace


class _SpeakingRecorder:
    def __init__(self, owner: "RecordingVoiceClient") -> None:
        self.owner = owner

    async def speak(self, state) -> None:
        self.owner.speaking.append((time.perf_counter(), int(state)))


class RecordingVoiceClient:
    timeout = 5.0

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.client = SimpleNamespace(loop=loop)
        self.ws = _SpeakingRecorder(self)
        self.packets: list[tuple[float, bytes]] = []
        self.speaking: list[tuple[float, int]] = []
        self._lock = threading.Lock()

    def send_audio_packet(self, data: bytes, *, encode: bool = True) -> None:
        assert not encode, "Tonearm's packets are Opus already: nothing may be encoded"
        with self._lock:
            self.packets.append((time.perf_counter(), bytes(data)))

    def is_connected(self) -> bool:
        return True

    def wait_until_connected(self, timeout: float | None = None) -> bool:
        return True

    def recorded(self) -> list[tuple[float, bytes]]:
        with self._lock:
            return list(self.packets)


class StandInVoice:
    """discord.py's own ``AudioPlayer`` thread over a ``RecordingVoiceClient``, controlled the way
    ``VoiceClient.play/pause/resume/stop`` control it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from discord.player import AudioPlayer

        self._player_type = AudioPlayer
        self.client = RecordingVoiceClient(loop)
        self.player = None

    def play(self, source) -> None:
        self.player = self._player_type(source, self.client)
        self.player.start()

    def pause(self) -> None:
        self.player.pause()

    def resume(self) -> None:
        self.player.resume()

    def is_paused(self) -> bool:
        return self.player is not None and self.player.is_paused()

    def is_playing(self) -> bool:
        return self.player is not None and self.player.is_playing()

    def stop(self) -> None:
        if self.player is not None:
            self.player.stop()
            self.player.join(timeout=2)
