"""pomice 2.11.1, unchanged, against Tonearm's Lavalink v4 API: a discord.py commands.Bot with
pomice's NodePool, its player made by `VoiceChannel.connect(cls=pomice.Player)` against a stand-in
for Discord's main gateway (conftest.MainGateway). Judged at the stand-in voice server.

pomice does not resume a session: when its socket drops it destroys its players, leaves the
channel, and connects again as a new session (pomice/pool.py, `Node._listen`), on Lavalink as here.
Its test therefore checks what its users see after a drop: the node back, and a new play heard."""

from __future__ import annotations

import asyncio
import time

import discord
import pomice
from discord.ext import commands

from conftest import CHANNEL, GUILD, PASSWORD, MainGateway, hear_the_controls, until


def test_pomice_plays_through_tonearm(node, standin):
    async def scenario() -> None:
        bot = commands.Bot(command_prefix="!", intents=discord.Intents.none())
        async with MainGateway(standin, client=bot) as gateway:
            events: list = []
            queue: list = []

            async def on_pomice_track_start(player: pomice.Player, track: pomice.Track) -> None:
                events.append(("start", track.title))

            async def on_pomice_track_end(player: pomice.Player, track: pomice.Track, reason: str) -> None:
                events.append(("end", track.title, reason))
                if queue and reason == "finished":
                    await player.play(queue.pop(0))

            bot.add_listener(on_pomice_track_start)
            bot.add_listener(on_pomice_track_end)
            lavalink = await pomice.NodePool().create_node(
                bot=bot, host="127.0.0.1", port=node.port, password=PASSWORD, identifier="tonearm")
            assert await until(lambda: lavalink._session_id is not None), "no ready op"

            files = await lavalink.get_tracks("tone-330.mp3", search_type=None)
            assert len(files) == 1 and files[0].track_type == pomice.TrackType.LOCAL and 2_900 <= files[0].length <= 3_100
            found = await lavalink.get_tracks("tonearm lofi")  # pomice's default: ytsearch
            assert len(found) == 10 and found[0].title == "tonearm lofi 1" and found[0].track_type == pomice.TrackType.YOUTUBE
            sound = await lavalink.get_tracks("tonearm", search_type=pomice.SearchType.scsearch)
            assert sound and sound[0].track_type == pomice.TrackType.SOUNDCLOUD
            link = (await lavalink.get_tracks(node.link))[0]
            assert link.track_type == pomice.TrackType.HTTP and link.uri == node.link

            player = await gateway.channel.connect(cls=pomice.Player)
            queue.append(link)
            await player.play(files[0])
            await standin.wait(lambda s: s["packets"] >= 50 and abs((s["dominant_hz"] or 0) - 330) < 10, what="the 330 Hz file")
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 880) < 10, timeout=8, what="the link after the file")
            assert ("end", "tone-330.mp3", "finished") in events and ("start", "tone-880.mp3") in events, events
            assert await until(lambda: player.is_connected and player.position > 0, 3)

            async def volume(value: int) -> None:
                await player.set_volume(value)

            async def pitch(value: float) -> None:
                await player.add_filter(pomice.Timescale(tag="pitch", pitch=value), fast_apply=True)

            async def no_filters() -> None:
                await player.reset_filters(fast_apply=True)

            await hear_the_controls(
                standin, volume=volume, pitch=pitch, no_filters=no_filters, seek=player.seek,
                position=lambda: player.position, pause=player.set_pause)

            # The socket drops: pomice destroys its player, leaves the channel (op 4 without a
            # channel), and connects again; its user joins and plays again, and is heard.
            session = lavalink._session_id
            await lavalink._websocket.close()
            assert await until(lambda: (GUILD, None) in gateway.ops, 5), gateway.ops
            silent = await standin.wait(lambda s: time.time() - s["last_at"] > 1, timeout=5, what="the player's end")
            # Back once its new session's ready op is read (pomice's listener reads it only after
            # its back-off sleep, up to 14 s after the drop).
            assert await until(lambda: lavalink.is_connected and lavalink._session_id != session, 30), "pomice never came back"
            player = await gateway.channel.connect(cls=pomice.Player)
            await player.play(link)
            await standin.wait(lambda s: s["first_at"] > silent["first_at"] and s["packets"] >= 50
                               and abs((s["dominant_hz"] or 0) - 880) < 10, timeout=8, what="a new play after the drop")

            await player.stop()
            stopping = await standin.wait(lambda s: s["silence_frames"] >= 5, timeout=3, what="silence frames on stop")
            await asyncio.sleep(1)
            assert standin.stream()["packets"] == stopping["packets"], "packets kept coming after stop"
            await player.destroy()
            await pomice.NodePool.disconnect()

    asyncio.run(scenario())
