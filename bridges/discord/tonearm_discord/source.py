"""The discord.py audio source that plays a guild's Tonearm session.

Opus packets go to Discord as the Router sent them: ``is_opus()`` is true, so discord.py creates
no encoder and the bot needs no libopus. ``read()`` is called by discord.py's player thread every
20 ms and answers from the jitter buffer at once.
"""

from __future__ import annotations

import discord

from .jitter import JitterBuffer


class TonearmSource(discord.AudioSource):
    def __init__(self, buffer: JitterBuffer) -> None:
        self.buffer = buffer
        self._closed = False

    def read(self) -> bytes:
        # b"" would end discord.py's player for good; only a closed source says so.
        if self._closed:
            return b""
        return self.buffer.read()

    def is_opus(self) -> bool:
        return True

    def close(self) -> None:
        """Ends the player at its next read (the bot left the channel)."""
        self._closed = True
        self.buffer.clear()
