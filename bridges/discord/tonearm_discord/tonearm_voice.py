"""The bot's part when Tonearm sends the guild's voice itself (``TONEARM_VOICE=tonearm``).

A ``discord.VoiceProtocol``: discord.py hands it the two events of the main gateway that a voice
connection needs (VOICE_STATE_UPDATE: the session id; VOICE_SERVER_UPDATE: the token and the
endpoint), and it forwards them to Tonearm with the ``voice`` command on the guild's link. Joining
and leaving the channel stay the bot's (the main gateway's op 4); everything after, the voice
gateway, UDP, encryption, pacing, is Tonearm's (docs/bot-protocol.md, "Voice sent by Tonearm").

Not usable with Discord yet: Tonearm does not speak DAVE, and Discord refuses a voice connection
without it (4017, which arrives as a ``voice_state`` of ``disconnected``). The tests play a guild
through the stand-in voice server with it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import discord

from .router_link import GuildLink, TonearmError

log = logging.getLogger("tonearm.voice")


class TonearmVoice(discord.VoiceProtocol):
    def __init__(self, client: discord.Client, channel: discord.abc.Connectable) -> None:
        super().__init__(client, channel)
        self.guild = channel.guild  # type: ignore[attr-defined]
        self.link: Optional[GuildLink] = None
        self.session_id: Optional[str] = None
        self.channel_id: Optional[str] = None
        self.token: Optional[str] = None
        self.endpoint: Optional[str] = None
        self.forwarded: Optional[tuple[str, ...]] = None
        # The voice connection needs no DAVE wait on this side; the bot's join looks for this.
        self.voice_privacy_code: Optional[str] = ""

    async def attach(self, link: GuildLink) -> None:
        """The guild's link to Tonearm: what arrived before it is forwarded now."""
        self.link = link
        await self._forward()

    async def relink(self) -> None:
        """The guild's link connected again: the credentials go again. The Router keeps a
        connection whose credentials did not change, and makes one where there is none (the
        Router restarted, or the guild moved to another pair of a cluster)."""
        self.forwarded = None
        await self._forward()

    async def on_voice_state_update(self, data: Any) -> None:
        if data.get("channel_id") is None:
            log.info("guild %s: left the voice channel", self.guild.id)
            self.channel_id = None
            return
        self.session_id = str(data.get("session_id"))
        self.channel_id = str(data.get("channel_id"))
        await self._forward()

    async def on_voice_server_update(self, data: Any) -> None:
        self.token = data.get("token")
        self.endpoint = data.get("endpoint")
        await self._forward()

    async def _forward(self) -> None:
        """Sends ``voice`` once all five values are known, and again when any of them changes
        (Discord moved the call: a new VOICE_SERVER_UPDATE)."""
        user = getattr(self.client, "user", None)
        values = (str(getattr(user, "id", "")), self.session_id, self.channel_id, self.token, self.endpoint)
        if self.link is None or not all(values) or values == self.forwarded:
            return
        user_id, session_id, channel_id, token, endpoint = values
        try:
            await self.link.command("voice", user_id=user_id, session_id=session_id, channel_id=channel_id,
                                    token=token, endpoint=endpoint)
            self.forwarded = values  # type: ignore[assignment]
        except TonearmError as error:
            log.warning("guild %s: Tonearm refused the voice credentials: %s", self.guild.id, error.message)

    async def connect(self, *, timeout: float, reconnect: bool, self_deaf: bool = False, self_mute: bool = False) -> None:
        await self.guild.change_voice_state(channel=self.channel, self_deaf=self_deaf, self_mute=self_mute)

    async def disconnect(self, *, force: bool = False) -> None:
        if self.link is not None and self.forwarded is not None:
            try:
                await self.link.command("voice_leave")
            except TonearmError:
                pass  # the connection had ended already, or the link is down: the Router's ends with Discord's
        self.forwarded = None
        await self.guild.change_voice_state(channel=None)
        self.cleanup()

    # What the guild's player asks of a voice client: Tonearm plays, the bot only follows.
    def play(self, source: Any) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def stop(self) -> None: ...
    def is_paused(self) -> bool: return False
    def is_playing(self) -> bool: return True


async def wait_forwarded(voice: TonearmVoice, timeout: float) -> bool:
    """Whether the credentials went to Tonearm within ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while voice.forwarded is None and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return voice.forwarded is not None
