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


class StandInVoiceProtocol:
    """What ``channel.connect(cls=…)`` creates in the slash-command tests: a voice connection
    with no Discord voice server behind it (simcord's voice is state only), playing through
    ``StandInVoice`` and reporting a DAVE privacy code at once."""

    def __new__(cls, client, channel):
        import discord

        class _Protocol(discord.VoiceProtocol):
            def __init__(self, client, channel) -> None:
                super().__init__(client, channel)
                self.voice = StandInVoice(client.loop)
                self.voice_privacy_code = "00000 00000 00000 00000 00000 00000"
                self.connected_with: dict = {}
                self.disconnected = False

            async def connect(self, *, timeout, reconnect, self_deaf=False, self_mute=False) -> None:
                self.connected_with = {"self_deaf": self_deaf, "reconnect": reconnect}

            async def disconnect(self, *, force: bool = False) -> None:
                self.voice.stop()
                self.disconnected = True
                self.cleanup()

            def play(self, source) -> None:
                self.voice.play(source)

            def pause(self) -> None:
                self.voice.pause()

            def resume(self) -> None:
                self.voice.resume()

            def is_paused(self) -> bool:
                return self.voice.is_paused()

            def is_playing(self) -> bool:
                return self.voice.is_playing()

            def stop(self) -> None:
                self.voice.stop()

        return _Protocol(client, channel)
