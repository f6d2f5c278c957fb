"""wavelink 3.5.2, unchanged, against Tonearm's Lavalink v4 API: a discord.py Client with a
wavelink Pool, a `wavelink.Player` as the voice protocol of a channel (what `channel.connect(
cls=wavelink.Player)` makes), and the two voice events of Discord's main gateway handed to it by
the test, which plays the gateway's part. Judged at the stand-in voice server."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import discord
import wavelink

from conftest import PASSWORD, USER, falls_silent, hear_the_controls, until, wavelink_player


def test_wavelink_plays_through_tonearm(node, standin):
    logging.basicConfig(level=logging.INFO)
    async def scenario() -> None:
        client = discord.Client(intents=discord.Intents.none())
        await client.__aenter__()  # its event loop, for dispatching wavelink's events
        client._connection.user = SimpleNamespace(id=USER)  # set by the main gateway's READY
        events: list = []

        async def started(payload: wavelink.TrackStartEventPayload) -> None:
            events.append(("start", payload.track.title))

        async def ended(payload: wavelink.TrackEndEventPayload) -> None:
            events.append(("end", payload.track.title, payload.reason))

        client.on_wavelink_track_start, client.on_wavelink_track_end = started, ended
        wavelink_node = wavelink.Node(uri=f"http://127.0.0.1:{node.port}", password=PASSWORD, resume_timeout=30)
        await wavelink.Pool.connect(nodes=[wavelink_node], client=client)
        assert await until(lambda: wavelink_node.status == wavelink.NodeStatus.CONNECTED), wavelink_node.status
        try:
            files = await wavelink.Playable.search("tone-330.mp3", source=None)
            assert len(files) == 1 and files[0].source == "local" and 2_900 <= files[0].length <= 3_100
            found = await wavelink.Playable.search("tonearm lofi")  # wavelink's default: ytmsearch
            assert len(found) == 10 and found[0].title == "tonearm lofi 1"
            link = (await wavelink.Playable.search(node.link))[0]
            assert link.source == "http" and link.uri == node.link

            player = await wavelink_player(client, standin)

            # wavelink's queue: the link follows the file on its TrackEndEvent.
            player.autoplay = wavelink.AutoPlayMode.partial
            player.queue.put(link)
            await player.play(files[0])
            await standin.wait(lambda s: s["packets"] >= 50 and abs((s["dominant_hz"] or 0) - 330) < 10, what="the 330 Hz file")
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 880) < 10, timeout=8, what="the link after the file")
            assert ("end", "tone-330.mp3", "finished") in events, events

            async def pitch(value: float) -> None:
                filters = wavelink.Filters()
                filters.timescale.set(pitch=value)
                await player.set_filters(filters)

            await hear_the_controls(
                standin, volume=player.set_volume, pitch=pitch, no_filters=player.set_filters, seek=player.seek,
                position=lambda: player.position, pause=player.pause)

            # The socket drops: wavelink resumes its session (its Session-Id, resuming asked on
            # connecting): the stand-in's stream goes on unbroken.
            heard = standin.stream()
            await wavelink_node._websocket.socket.close()
            after = await standin.wait(lambda s: s["packets"] > heard["packets"] + 100, timeout=5, what="the music after the drop")
            assert after["first_at"] == heard["first_at"] and after["sequence_breaks"] == 0, after
            assert await until(lambda: wavelink_node.status == wavelink.NodeStatus.CONNECTED, 10)

            await player.stop()
            await falls_silent(standin, "stop", frames=10, settle=1)
        finally:
            await wavelink.Pool.close()
            await client.close()

    asyncio.run(scenario())
