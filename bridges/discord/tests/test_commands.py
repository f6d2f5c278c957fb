"""Each slash command's effect on the guild's state in the real Router, and its refusals in the
Router's own words."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tonearm_discord.commands import Commands, clock, looks_like_a_link, parse_clock
from tonearm_discord.guild_player import GuildPlayer
from tonearm_discord.router_link import TonearmError


def test_clock_and_links():
    assert parse_clock("90") == 90_000 and parse_clock("1:30") == 90_000 and parse_clock("1:02:03") == 3_723_000
    with pytest.raises(ValueError):
        parse_clock("soon")
    assert clock(61_000) == "1:01" and clock(3_723_000) == "1:02:03" and clock(None) == "live"
    assert looks_like_a_link("https://example.com/a") and looks_like_a_link("tone-440.mp3")
    assert not looks_like_a_link("never gonna give")


def test_a_link_still_being_looked_up_is_said_so():
    class Link:
        async def command(self, op, **arguments):
            return {"type": "state", "queue": [], "status": "idle",
                    "resolving": [{"url": arguments["url"], "command": op}]}

    async def scenario():
        commands = Commands(Link(), None, "http://unused", "token")
        assert await commands.play("https://example.com/slow.mp3", now=True) == (
            "Looking up **https://example.com/slow.mp3**… it plays as soon as it is found.")
        assert await commands.play("https://example.com/slow.mp3") == (
            "Looking up **https://example.com/slow.mp3**… it joins the queue as soon as it is found.")

    asyncio.run(scenario())


def test_every_command_against_the_router(cluster):
    async def scenario():
        player = GuildPlayer("223344556677889900", cluster.url, cluster.token)
        player.start()
        await player.link.wait_connected(10)
        async with aiohttp.ClientSession() as http:
            commands = Commands(player.link, http, cluster.url, cluster.token)
            link = player.link
            try:
                assert await commands.play("tone-440.mp3") == "Playing **tone-440.mp3**"
                assert await commands.play("tone-880.mp3") == "Queued **tone-880.mp3** (position 2)"
                listing = await commands.queue()
                assert listing.splitlines()[0].startswith("▶ ") and "2." in listing.splitlines()[1]

                assert (await commands.simple("skip")).startswith("Skipped to **")
                assert (await link.command("state"))["current"] == 1
                await commands.simple("previous")
                assert (await link.command("state"))["current"] == 0

                await asyncio.sleep(1)  # let the track start before pausing it
                assert await commands.simple("pause") == "Paused."
                assert (await link.command("state"))["status"] == "paused"
                assert await commands.simple("resume") == "Resumed."
                assert (await link.command("state"))["status"] in ("playing", "starting")

                assert await commands.seek("0:05") == "Moved to 0:05."
                assert (await link.command("state"))["position_ms"] >= 5_000
                assert await commands.volume(50) == "Volume 50 %."
                assert (await link.command("state"))["volume"] == 50
                assert await commands.loop("track") == "Looping this track."
                assert (await link.command("state"))["loop"] == "track"
                assert await commands.simple("shuffle") == "Shuffled what is coming up."
                assert await commands.equalizer("bass boost") == "Equalizer: bass boost."
                assert (await link.command("state"))["filters"]["equalizer"][0] == {"band": 0, "gain": 0.25}
                assert await commands.effect("8D") == "Effect: 8D."
                filters = (await link.command("state"))["filters"]
                assert filters["rotation"] == {"rotationHz": 0.2} and filters["equalizer"][0]["gain"] == 0.25
                assert await commands.equalizer("flat") == "Equalizer off."
                assert (await link.command("state"))["filters"] == {"equalizer": [], "rotation": {"rotationHz": 0.2}}
                assert await commands.effect("nightcore") == "Effect: nightcore."
                assert (await link.command("state"))["filters"]["timescale"] == {"speed": 1, "pitch": 1, "rate": 1.25}
                assert await commands.effect("none") == "Effect off."
                assert (await link.command("state"))["filters"] == {"equalizer": []}
                assert (await link.command("state"))["normalize"] is True
                assert await commands.normalize(False) == "Tracks at their own loudness."
                assert (await link.command("state"))["normalize"] is False
                assert await commands.normalize(True) == "Every track at the same loudness."
                assert (await link.command("state"))["normalize"] is True
                assert (await link.command("state"))["cue"] is False
                assert await commands.cue(True) == (
                    "Tracks join where the music ends and begins, without the silence between them.")
                assert (await link.command("state"))["cue"] is True
                assert await commands.cue(False) == "Tracks play to their very ends."
                assert (await link.command("state"))["cue"] is False
                assert (await link.command("state"))["crossfade_ms"] == 0
                assert await commands.crossfade(2.5) == "Each track fades into the next over 2.5 s."
                assert (await link.command("state"))["crossfade_ms"] == 2500
                assert await commands.crossfade(0) == "Crossfade off: each track starts on the sample the last one ends."
                assert (await link.command("state"))["crossfade_ms"] == 0

                # The listeners' link: a page of the public address whose token hears the guild.
                with pytest.raises(TonearmError) as refused:
                    await commands.radio(None)
                assert refused.value.code == "no_public_url" and "TONEARM_PUBLIC_URL" in refused.value.message
                answer = await commands.radio("https://radio.example/")
                page = answer.split("https://radio.example", 1)[1].split(" ", 1)[0]
                assert page.startswith("/radio/?session=223344556677889900&token=l1.223344556677889900."), answer
                token = page.split("token=", 1)[1]
                async with http.get(f"{cluster.url}/listen/223344556677889900.ogg?token={token}") as heard:
                    assert heard.status == 200 and (await heard.content.readexactly(4)) == b"OggS"
                async with http.post(f"{cluster.url}/api/sessions/223344556677889900/pause?token={token}") as control:
                    assert control.status == 403

                playing = await commands.now_playing()
                assert playing["title"] == "tone-440.mp3" and playing["duration"] == "0:30"

                # A station: the guild follows it, its own controls are refused until it unfollows.
                assert (await commands.follow(" radio ")).startswith("Following **radio**")
                assert (await link.command("state"))["following"] == "radio"
                with pytest.raises(TonearmError) as refused:
                    await commands.simple("pause")
                assert refused.value.code == "following" and "radio" in refused.value.message
                with pytest.raises(TonearmError) as refused:
                    await commands.follow("  ")
                assert refused.value.code == "missing_station"
                assert (await commands.unfollow()).startswith("Stopped following.")
                assert "following" not in await link.command("state")
                with pytest.raises(TonearmError) as refused:
                    await commands.unfollow()
                assert refused.value.code == "not_following"

                assert await commands.remove(2) == "Removed **tone-880.mp3**."
                assert len((await link.command("state"))["queue"]) == 1

                # Refusals come back as the Router's sentences.
                with pytest.raises(TonearmError) as refused:
                    await commands.remove(9)
                assert refused.value.code == "invalid_index"
                with pytest.raises(TonearmError) as refused:
                    await commands.volume(5_000)
                assert refused.value.code == "invalid_volume" and "1000" in refused.value.message
                with pytest.raises(TonearmError) as refused:
                    await commands.play("missing.mp3")
                assert refused.value.code == "source_not_found"

                # Words are searched (a stand-in for YouTube here) and the first result played.
                found = await commands.search("some words")
                assert found["title"] == "some words 1"

                assert await commands.simple("stop") == "Stopped."
                assert (await link.command("state"))["status"] == "idle"
            finally:
                await player.close()

    asyncio.run(scenario())


def test_a_refused_token_is_said_at_once_and_not_retried(cluster):
    from tonearm_discord.router_link import Unauthorized

    async def scenario():
        player = GuildPlayer("223344556677889901", cluster.url, "not-the-bot-token")
        player.start()
        started = asyncio.get_running_loop().time()
        with pytest.raises(Unauthorized) as refused:
            await player.link.wait_connected(10)
        assert asyncio.get_running_loop().time() - started < 5
        assert "TONEARM_BOT_TOKEN" in refused.value.message and "401" in refused.value.message
        await asyncio.sleep(1)
        assert player.link.connections == 1, "retried a refused token"
        await player.close()

    asyncio.run(scenario())
