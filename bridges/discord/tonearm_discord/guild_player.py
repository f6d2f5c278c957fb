"""What one guild's voice connection does with the Router's events.

The voice client plays one ``TonearmSource`` for as long as the bot is in the channel. Discord's
speaking flag follows the session: discord.py's player is resumed (speaking on) on ``ready`` and
``resumed``, and paused (speaking off, five silence frames) on ``paused`` and ``finished`` once
the jitter buffer has played out what was still in it. On ``finished`` with ``engine_restarted``
the guild's track is resumed where it was.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional, Protocol

from .jitter import JitterBuffer
from .router_link import GuildLink, TonearmError
from .source import TonearmSource

log = logging.getLogger("tonearm.guild")


class VoicePlayback(Protocol):
    """The part of discord.py's ``VoiceClient`` used here."""

    def play(self, source: Any) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def is_paused(self) -> bool: ...
    def is_playing(self) -> bool: ...
    def stop(self) -> None: ...


class GuildPlayer:
    def __init__(self, guild_id: int | str, router_url: str, token: str, **link_options: Any) -> None:
        self.guild_id = str(guild_id)
        self.buffer = JitterBuffer()
        self.source = TonearmSource(self.buffer)
        self.link = GuildLink(router_url, token, guild_id, self.buffer, self.on_event, **link_options)
        self.voice: Optional[VoicePlayback] = None
        self._drain: Optional[asyncio.Task[None]] = None
        self._connection_seen = 0

    async def attach(self, voice: VoicePlayback) -> None:
        """Starts playing into `voice` (paused until the session plays)."""
        self.voice = voice
        voice.play(self.source)
        if not self._session_playing():
            voice.pause()

    def start(self) -> None:
        self.link.start()

    async def close(self) -> None:
        self.source.close()
        if self.voice is not None:
            self.voice.stop()
        await self.link.close()

    def _session_playing(self) -> bool:
        return bool(self.link.state and self.link.state.get("status") == "playing")

    async def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind in ("ready", "resumed"):
            self._speak(True)
        elif kind == "state":
            # The first message of every connection: follow it, whatever was missed meanwhile.
            if self.link.connections != self._connection_seen:
                self._connection_seen = self.link.connections
                relink = getattr(self.voice, "relink", None)  # Tonearm sends the voice (TonearmVoice)
                if relink is not None:
                    # Not awaited here: its command's reply comes through this same link.
                    asyncio.get_running_loop().create_task(relink())
            status = event.get("status")
            if event.get("following"):
                pass  # the guild hears a station: its events (``ready``, ``paused``, …) say when it plays
            elif status == "playing":
                self._speak(True)
            elif status in ("idle", "paused"):
                self._speak(False)
        elif kind in ("paused", "finished"):
            self._speak(False, drain=kind == "finished")
            if kind == "finished" and event.get("code") == "engine_restarted":
                log.info("guild %s: the audio engine restarted; resuming", self.guild_id)
                asyncio.get_running_loop().create_task(self._resume_after_restart())
        if kind in ("ready", "finished", "error", "paused", "resumed"):
            log.info("guild %s: %s %s", self.guild_id, kind, event.get("title") or event.get("reason") or event.get("code") or "")

    def _speak(self, on: bool, drain: bool = False) -> None:
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        voice = self.voice
        if voice is None:
            return
        if on:
            if voice.is_paused():
                self.buffer.clear()
                voice.resume()
        elif drain:
            self._drain = asyncio.get_running_loop().create_task(self._pause_when_drained())
        elif not voice.is_paused():
            voice.pause()

    async def _pause_when_drained(self, limit: float = 0.5) -> None:
        """Lets the last packets (≤ 10 × 20 ms) play before speaking stops."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while self.buffer.waiting > 0 and loop.time() < deadline:
            await asyncio.sleep(0.02)
        if self.voice is not None and not self.voice.is_paused():
            self.voice.pause()

    async def _resume_after_restart(self) -> None:
        try:
            await self.link.command("resume")
        except TonearmError as error:
            log.warning("guild %s: could not resume after the engine restarted: %s", self.guild_id, error.message)
