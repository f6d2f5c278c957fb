"""The slash commands as a Discord user meets them: the real bot, unmodified, inside simcord's
simulated Discord (its gateway, interactions, deferrals and follow-ups), talking to the real
Router and engine. Only the voice connection is a stand-in (simcord's voice is state only): it
plays through discord.py's own player thread and records what would go to Discord.

simcord must be told which waits are on the world outside it (the Router): the bot's
``external_wait`` is simcord's there (tonearm_discord/waits.py)."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import discord
import simcord

from audio import decode, dominant_frequency, is_silence
from standin import StandInVoiceProtocol
from tonearm_discord.bot import TonearmBot
from tonearm_discord.config import Config


@asynccontextmanager
async def discord_with_the_bot(cluster, **config):
    # simcord's clock jumps when a test advances it, while the Router's is real: the link's ping
    # and silence timeouts would fire on a live connection, so they are off here
    # (test_router_link.py holds them, on a real clock).
    config = {"router_ping_seconds": None, "router_silence_seconds": None, **config}
    bot = TonearmBot(Config(discord_token="unused", bot_token=cluster.token, router_url=cluster.url, **config))
    bot.voice_client_class = StandInVoiceProtocol
    async with simcord.run(bot) as env:
        bot.external_wait = env.external_wait
        guild = env.create_guild()
        world = {
            "env": env,
            "bot": bot,
            "guild": guild,
            "text": guild.create_text_channel("general"),
            "music": guild.create_voice_channel("music"),
            "alice": guild.add_member(env.create_user("alice")),
        }
        try:
            yield world
        finally:
            await bot.close()


async def said(result, timeout: float = 20.0) -> str:
    """What the user reads: the deferred answer ("thinking…"), edited by the bot's follow-up
    once Tonearm answered (simcord hands the result back while the bot waits on the Router)."""
    assert result.acknowledged, "the bot did not acknowledge at once"
    deadline = time.monotonic() + timeout
    while not (result.response.content or result.response.embeds):
        if time.monotonic() > deadline:
            raise AssertionError(f"still thinking after {timeout} s: {result}")
        await asyncio.sleep(0.02)
    return result.response.content


async def audible_packets(voice, count: int, timeout: float = 10.0) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        packets = [p for _, p in voice.client.recorded() if not is_silence(p)]
        if len(packets) >= count:
            return packets
        await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(packets)} audible packets reached the voice connection")


def test_a_user_plays_music_with_slash_commands(cluster):
    async def scenario():
        async with discord_with_the_bot(cluster, playground_url="https://tonearm.example/") as world:
            bot, guild, text, alice = world["bot"], world["guild"], world["text"], world["alice"]
            # Before anything plays: answers that say what to do.
            assert await said(await alice.slash(text, "queue")) == "⚠️ I am not in a voice channel here; start with /play"
            assert await said(await alice.slash(text, "play", query="tone-440.mp3")) == "⚠️ join a voice channel first, then /play"
            assert guild.id not in bot.players

            await alice.join_voice(world["music"])
            assert await said(await alice.slash(text, "play", query="tone-440.mp3")) == "Playing **tone-440.mp3**"
            voice = guild_voice(bot, guild)
            assert voice.channel.id == world["music"].id and voice.connected_with["self_deaf"]
            packets = await audible_packets(voice.voice, 100)
            assert abs(dominant_frequency(decode(packets[10:])) - 440) < 10

            assert await said(await alice.slash(text, "play", query="tone-880.mp3")) == "Queued **tone-880.mp3** (position 2)"
            listing = (await said(await alice.slash(text, "queue"))).splitlines()
            assert listing[0] == "▶ tone-440.mp3 (0:30)" and listing[1].startswith("2. tone-880.mp3")

            now = await alice.slash(text, "nowplaying")
            await said(now)
            embed = now.response.embeds[0]
            assert embed.title == "tone-440.mp3"
            fields = {field.name: field.value for field in embed.fields}
            assert fields["Position"].endswith("/ 0:30") and fields["Status"] == "playing"
            assert f"(https://tonearm.example/guilds/#{guild.id})" in fields["Playground"]

            radio = await said(await alice.slash(text, "radio"))
            assert radio.startswith("Listen in a browser") and f"https://tonearm.example/radio/?session={guild.id}&token=l1." in radio

            assert await said(await alice.slash(text, "pause")) == "Paused."
            await wait_until(lambda: voice.is_paused())
            assert await said(await alice.slash(text, "resume")) == "Resumed."
            await wait_until(lambda: voice.is_playing())
            assert await said(await alice.slash(text, "volume", percent=50)) == "Volume 50 %."
            assert await said(await alice.slash(text, "equalizer", preset="bass boost")) == "Equalizer: bass boost."
            assert (await said(await alice.slash(text, "seek", position="soon"))).startswith("⚠️")
            assert (await said(await alice.slash(text, "remove", position=9))).startswith("⚠️")
            assert await said(await alice.slash(text, "skip")) == "Skipped to **tone-880.mp3**"
            heard = len(voice.voice.client.recorded())
            packets = await audible_packets(voice.voice, 0)
            await wait_until(lambda: len(voice.voice.client.recorded()) > heard + 150)
            later = [p for _, p in voice.voice.client.recorded()[heard + 50 :] if not is_silence(p)]
            assert abs(dominant_frequency(decode(later[10:])) - 880) < 15

            # /over: a sound over the music, heard in the same voice stream; the 880 Hz track
            # ducks 12 dB under the 440 Hz sound, which is what dominates then.
            assert await said(await alice.slash(text, "over", query="tone-440.mp3")) == "Playing **tone-440.mp3** over the music."
            heard = len(voice.voice.client.recorded())
            await wait_until(lambda: len(voice.voice.client.recorded()) > heard + 100)
            over = [p for _, p in voice.voice.client.recorded()[heard + 25 :] if not is_silence(p)]
            assert abs(dominant_frequency(decode(over)) - 440) < 15

            assert await said(await alice.slash(text, "leave")) == "Left the voice channel."
            assert voice.disconnected and guild.id not in bot.players
            assert await said(await alice.slash(text, "skip")) == "⚠️ I am not in a voice channel here; start with /play"

    asyncio.run(scenario())


def test_words_are_searched_and_the_first_result_played(cluster):
    async def scenario():
        async with discord_with_the_bot(cluster) as world:
            await world["alice"].join_voice(world["music"])
            answer = await said(await world["alice"].slash(world["text"], "play", query="some words"))
            # The search is the stand-in's; its first result is a YouTube page, which this
            # machine cannot reach: the user is told what was found and why it cannot play.
            assert answer.startswith("⚠️ found **some words 1**, but "), answer

    asyncio.run(scenario())


def test_the_bot_leaves_a_channel_nobody_listens_in(cluster):
    async def scenario():
        async with discord_with_the_bot(cluster, idle_leave_seconds=60) as world:
            env, bot, guild, alice = world["env"], world["bot"], world["guild"], world["alice"]
            await alice.join_voice(world["music"])
            assert await said(await alice.slash(world["text"], "play", query="tone-440.mp3")) == "Playing **tone-440.mp3**"
            voice = guild_voice(bot, guild)
            await env.advance_time(120)
            assert guild.id in bot.players, "left although someone was listening"
            await alice.leave_voice()
            await env.advance_time(30)
            assert guild.id in bot.players, "left before the idle time"
            await env.advance_time(40)
            assert guild.id not in bot.players and voice.disconnected, "stayed in an empty channel"

    asyncio.run(scenario())


def test_a_failure_inside_the_bot_is_answered_not_left_thinking(cluster):
    class BrokenVoice(discord.VoiceProtocol):
        async def connect(self, **_) -> None:
            raise RuntimeError("the voice connection broke")

        async def disconnect(self, *, force: bool = False) -> None:
            self.cleanup()

    async def scenario():
        async with discord_with_the_bot(cluster) as world:
            world["bot"].voice_client_class = BrokenVoice
            await world["alice"].join_voice(world["music"])
            answer = await said(await world["alice"].slash(world["text"], "play", query="tone-440.mp3"))
            assert answer == "⚠️ something went wrong on my side; the operator can find it in my log"

    asyncio.run(scenario())


def guild_voice(bot: TonearmBot, guild) -> StandInVoiceProtocol:
    voice = bot.get_guild(guild.id).voice_client
    assert voice is not None, "the bot did not join voice"
    return voice


async def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)
