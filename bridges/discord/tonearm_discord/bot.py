"""The Discord bot: slash commands, one voice connection and one Router link per guild.

Joining: ``/play`` by someone in a voice channel connects there (self-deafened), waits until
DAVE reports the call's privacy code (audio sent earlier goes out unencrypted and listeners may
drop it), and starts the guild's ``GuildPlayer``. Leaving: ``/leave``, or a channel with nobody
else in it for ``TONEARM_IDLE_LEAVE_SECONDS``. discord.py reconnects dropped voice connections
itself (``reconnect=True``); the player keeps its source across them. With
``TONEARM_VOICE=tonearm`` Tonearm sends the audio itself and the bot only forwards its voice
events (``tonearm_voice.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

import aiohttp
import discord
from discord import app_commands

from .commands import EFFECT_PRESETS, EQUALIZER_PRESETS, Commands
from .config import Config
from .guild_player import GuildPlayer
from .router_link import TonearmError, Unauthorized
from .tonearm_voice import TonearmVoice
from .waits import ExternalWait, direct

log = logging.getLogger("tonearm.bot")


class TonearmBot(discord.Client):
    # What joins a voice channel, and how waits on Tonearm are awaited: discord.py's voice client
    # and a plain await; the slash-command tests put simcord's stand-ins here.
    voice_client_class: type[discord.VoiceProtocol] = discord.VoiceClient
    external_wait: ExternalWait = staticmethod(direct)

    def __init__(self, config: Config) -> None:
        intents = discord.Intents.none()
        intents.guilds = True
        intents.voice_states = True
        super().__init__(intents=intents)
        self.config = config
        if config.voice == "tonearm":
            self.voice_client_class = TonearmVoice
        self.tree = app_commands.CommandTree(self)
        self.players: dict[int, GuildPlayer] = {}
        self.http_session: Optional[aiohttp.ClientSession] = None
        self.started = time.monotonic()
        self._alone_since: dict[int, float] = {}
        self._idle_watch: Optional[asyncio.Task[None]] = None
        register_commands(self)

    async def setup_hook(self) -> None:
        self.http_session = aiohttp.ClientSession()
        await self.tree.sync()

    async def close(self) -> None:
        if self._idle_watch is not None:
            self._idle_watch.cancel()
        for guild_id in list(self.players):
            await self.leave(guild_id)
        if self.http_session is not None:
            await self.http_session.close()
        await super().close()

    # Voice ----------------------------------------------------------------------------------

    async def join(self, interaction: discord.Interaction) -> GuildPlayer:
        """The guild's player, connecting to the caller's voice channel first when needed."""
        guild = interaction.guild
        if guild is None:
            raise TonearmError("guild_only", "play me in a server's voice channel, not in a direct message")
        player = self.players.get(guild.id)
        if player is not None and guild.voice_client is not None:
            return player
        member = interaction.user
        channel = getattr(getattr(member, "voice", None), "channel", None)
        if channel is None:
            raise TonearmError("not_in_voice", "join a voice channel first, then /play")
        voice = await channel.connect(cls=self.voice_client_class, self_deaf=True, reconnect=True, timeout=30)
        # DAVE: audio before the MLS group is ready would go out unencrypted.
        deadline = time.monotonic() + 10
        while voice.voice_privacy_code is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if player is None:
            player = GuildPlayer(
                guild.id, self.config.router_url, self.config.bot_token, session=self.http_session, wait=self.external_wait,
                heartbeat=self.config.router_ping_seconds, silence_timeout=self.config.router_silence_seconds,
                frames=self.config.frames_per_message,
            )
            self.players[guild.id] = player
            player.start()
            try:
                await player.link.wait_connected(10)
            except asyncio.TimeoutError:
                raise TonearmError("not_connected", "Tonearm is not reachable right now; try again in a moment")
        await player.attach(voice)
        if isinstance(voice, TonearmVoice):
            # Tonearm sends the audio: it gets the credentials that came while joining.
            await voice.attach(player.link)
        if self._idle_watch is None or self._idle_watch.done():
            self._idle_watch = asyncio.get_running_loop().create_task(self._leave_empty_channels())
        log.info("guild %s: joined voice channel %s", guild.id, channel.id)
        return player

    async def leave(self, guild_id: int) -> None:
        player = self.players.pop(guild_id, None)
        if player is not None:
            await player.close()
        guild = self.get_guild(guild_id)
        if guild is not None and guild.voice_client is not None:
            await guild.voice_client.disconnect(force=True)
        self._alone_since.pop(guild_id, None)
        log.info("guild %s: left voice", guild_id)

    async def _leave_empty_channels(self) -> None:
        """Every 5 s while the bot is in voice anywhere."""
        loop = asyncio.get_running_loop()
        while self.players and not self.is_closed():
            await self.external_wait(asyncio.sleep(5), reason="the idle-leave check's timer")
            now = loop.time()
            for guild_id in list(self.players):
                guild = self.get_guild(guild_id)
                channel = getattr(guild.voice_client, "channel", None) if guild else None
                listeners = [m for m in getattr(channel, "members", []) if not m.bot]
                if listeners:
                    self._alone_since.pop(guild_id, None)
                    continue
                since = self._alone_since.setdefault(guild_id, now)
                if now - since >= self.config.idle_leave_seconds:
                    await self.leave(guild_id)

    async def on_voice_state_update(
        self, member: discord.Member, before: discord.VoiceState, after: discord.VoiceState
    ) -> None:
        """Disconnected by someone else (kicked, the channel deleted): let the guild go. A move
        to another channel is followed by discord.py itself; the player goes along."""
        if self.user is None or member.id != self.user.id:
            return
        if before.channel is not None and after.channel is None and member.guild.id in self.players:
            log.info("guild %s: disconnected from voice by Discord or a moderator", member.guild.id)
            await self.leave(member.guild.id)

    def commands_for(self, guild_id: int) -> Optional[Commands]:
        player = self.players.get(guild_id)
        if player is None or self.http_session is None:
            return None
        return Commands(
            player.link, self.http_session, self.config.router_url, self.config.bot_token, wait=self.external_wait
        )

    def health(self) -> dict:
        return {
            "status": "ok" if self.is_ready() else "connecting",
            "discord_connected": self.is_ready(),
            "guilds": len(self.guilds),
            "voice_connections": len(self.players),
            "router_links": sum(1 for p in self.players.values() if p.link.connected),
            "uptime_seconds": round(time.monotonic() - self.started, 1),
        }


def register_commands(bot: TonearmBot) -> None:
    tree = bot.tree

    async def answer(interaction: discord.Interaction, work) -> None:
        """Runs `work` (→ text or an embed) after deferring, and answers with it or the refusal."""
        await interaction.response.defer(thinking=True)
        try:
            text = await work()
            if isinstance(text, discord.Embed):
                await interaction.followup.send(embed=text)
                return
        except Unauthorized as error:
            log.error("%s", error.message)
            text = "⚠️ this bot is not allowed to use Tonearm (its token was refused)"
        except TonearmError as error:
            text = f"⚠️ {error.message}"
        except Exception:
            # Whatever went wrong, the user gets an answer instead of "thinking…" for ever.
            log.exception("guild %s: /%s failed", interaction.guild_id, getattr(interaction.command, "name", "?"))
            text = "⚠️ something went wrong on my side; the operator can find it in my log"
        await interaction.followup.send(text)

    def guild_commands(interaction: discord.Interaction) -> Commands:
        commands = bot.commands_for(interaction.guild_id or 0)
        if commands is None:
            raise TonearmError("not_playing", "I am not in a voice channel here; start with /play")
        return commands

    @tree.command(description="Play a link, a file name or the first search result (queued after what plays)")
    @app_commands.describe(query="a link, or words to search for")
    async def play(interaction: discord.Interaction, query: str) -> None:
        async def work() -> str:
            await bot.join(interaction)
            return await guild_commands(interaction).play(query)

        await answer(interaction, work)

    @tree.command(description="Play a sound, a link or the first search result over the music (it gets quieter meanwhile)")
    @app_commands.describe(query="a link, a file name, or words to search for", volume="its level in percent (100 = as recorded)")
    async def over(interaction: discord.Interaction, query: str, volume: app_commands.Range[int, 0, 1000] = 100) -> None:
        await answer(interaction, lambda: guild_commands(interaction).over(query, volume))

    @tree.command(description="Show the queue")
    async def queue(interaction: discord.Interaction) -> None:
        await answer(interaction, lambda: guild_commands(interaction).queue())

    def simple_command(op: str):
        async def command(interaction: discord.Interaction) -> None:
            await answer(interaction, lambda: guild_commands(interaction).simple(op))

        return command

    for name, description in (
        ("skip", "Play the next track"),
        ("previous", "Play the previous track (or restart this one)"),
        ("pause", "Pause"),
        ("resume", "Resume"),
        ("stop", "Stop playing (the queue stays)"),
        ("shuffle", "Shuffle what is coming up"),
    ):
        tree.command(name=name, description=description)(simple_command(name))

    @tree.command(description="Move to a time in the track (90, 1:30)")
    async def seek(interaction: discord.Interaction, position: str) -> None:
        await answer(interaction, lambda: guild_commands(interaction).seek(position))

    @tree.command(description="Set the volume in percent (100 = as recorded)")
    async def volume(interaction: discord.Interaction, percent: app_commands.Range[int, 0, 1000]) -> None:
        await answer(interaction, lambda: guild_commands(interaction).volume(percent))

    @tree.command(description="Shape the sound: bass boost, treble boost, vocals, soft, or flat (heard at once)")
    @app_commands.choices(preset=[app_commands.Choice(name=p, value=p) for p in EQUALIZER_PRESETS])
    async def equalizer(interaction: discord.Interaction, preset: app_commands.Choice[str]) -> None:
        await answer(interaction, lambda: guild_commands(interaction).equalizer(preset.value))

    @tree.command(description="An effect: 8D, karaoke, tremolo, vibrato, muffled, mono, or none (heard at once)")
    @app_commands.choices(preset=[app_commands.Choice(name=p, value=p) for p in EFFECT_PRESETS])
    async def effect(interaction: discord.Interaction, preset: app_commands.Choice[str]) -> None:
        await answer(interaction, lambda: guild_commands(interaction).effect(preset.value))

    @tree.command(description="Play every track at the same loudness (on) or as mastered (off)")
    async def normalize(interaction: discord.Interaction, on: bool) -> None:
        await answer(interaction, lambda: guild_commands(interaction).normalize(on))

    @tree.command(description="Skip the silence at the ends of tracks, so each joins the next where the music is (on) or not (off)")
    async def cue(interaction: discord.Interaction, on: bool) -> None:
        await answer(interaction, lambda: guild_commands(interaction).cue(on))

    @tree.command(description="Fade each track into the next over 1 to 12 seconds, or 0 for none (gapless)")
    async def crossfade(interaction: discord.Interaction, seconds: app_commands.Range[float, 0, 12]) -> None:
        await answer(interaction, lambda: guild_commands(interaction).crossfade(seconds))

    @tree.command(description="Hear a station (a session other servers hear too) instead of this server's queue")
    @app_commands.describe(station="the station's name")
    async def follow(interaction: discord.Interaction, station: str) -> None:
        await answer(interaction, lambda: guild_commands(interaction).follow(station))

    @tree.command(description="Stop following the station: this server's own queue again")
    async def unfollow(interaction: discord.Interaction) -> None:
        await answer(interaction, lambda: guild_commands(interaction).unfollow())

    @tree.command(description="Loop off, this track, or the queue")
    @app_commands.choices(mode=[app_commands.Choice(name=m, value=m) for m in ("off", "track", "queue")])
    async def loop(interaction: discord.Interaction, mode: app_commands.Choice[str]) -> None:
        await answer(interaction, lambda: guild_commands(interaction).loop(mode.value))

    @tree.command(description="Remove a track (its number in /queue)")
    async def remove(interaction: discord.Interaction, position: app_commands.Range[int, 1, 1000]) -> None:
        await answer(interaction, lambda: guild_commands(interaction).remove(position))

    @tree.command(description="What is playing")
    async def nowplaying(interaction: discord.Interaction) -> None:
        async def work() -> discord.Embed:
            playing = await guild_commands(interaction).now_playing()
            link = playing["url"] if str(playing["url"]).startswith(("http://", "https://")) else None
            embed = discord.Embed(title=playing["title"], url=link)
            embed.add_field(name="Position", value=f"{playing['position']} / {playing['duration']}")
            embed.add_field(name="Status", value=playing["status"])
            embed.add_field(name="Volume", value=f"{playing['volume']} %")
            embed.add_field(name="Loop", value=playing["loop"])
            if bot.config.playground_url:
                # The operator's page for this guild (it asks for the bot token).
                page = f"{bot.config.playground_url.rstrip('/')}/guilds/#{interaction.guild_id}"
                embed.add_field(name="Playground", value=f"[this guild's controls]({page})", inline=False)
            return embed

        await answer(interaction, work)

    @tree.command(description="A link for listeners outside Discord: a web page that plays this server's music")
    async def radio(interaction: discord.Interaction) -> None:
        await answer(interaction, lambda: guild_commands(interaction).radio(bot.config.playground_url))

    @tree.command(description="Leave the voice channel")
    async def leave(interaction: discord.Interaction) -> None:
        async def work() -> str:
            await bot.leave(interaction.guild_id or 0)
            return "Left the voice channel."

        await answer(interaction, work)
