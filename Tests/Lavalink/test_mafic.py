"""mafic 2.11.0, unchanged, against Tonearm's Lavalink v4 API: a discord.py Client with mafic's
NodePool, its players made by `VoiceChannel.connect(cls=mafic.Player)` against a stand-in for
Discord's main gateway (conftest.MainGateway), and a restarted bot resuming its session by the id
it kept, as mafic's documentation asks (`resuming_session_id`). Judged at the stand-in voice
server."""

from __future__ import annotations

import asyncio

import mafic

from conftest import GUILD, PASSWORD, MainGateway, hear_the_controls, until


def test_mafic_plays_through_tonearm(node, standin):
    async def scenario() -> None:
        async with MainGateway(standin) as gateway:
            client = gateway.client
            events: list = []
            queue: list = []

            async def on_track_start(event: mafic.TrackStartEvent) -> None:
                events.append(("start", event.track.title))

            async def on_track_end(event: mafic.TrackEndEvent) -> None:
                events.append(("end", event.track.title, event.reason.value))
                if queue and event.reason == mafic.EndReason.FINISHED:
                    await event.player.play(queue.pop(0))

            client.on_track_start, client.on_track_end = on_track_start, on_track_end
            pool = mafic.NodePool(client)
            lavalink = await pool.create_node(host="127.0.0.1", port=node.port, label="tonearm", password=PASSWORD)
            session = lavalink.session_id  # what a bot keeps to resume after a restart

            found = await lavalink.fetch_tracks("tonearm lofi", search_type=mafic.SearchType.YOUTUBE.value)
            assert len(found) == 10 and found[0].title == "tonearm lofi 1" and found[0].source == "youtube"
            sound = await lavalink.fetch_tracks("tonearm", search_type=mafic.SearchType.SOUNDCLOUD.value)
            assert sound and sound[0].source == "soundcloud"
            link = (await lavalink.fetch_tracks(node.link, search_type=mafic.SearchType.YOUTUBE.value))[0]
            assert link.source == "http" and link.uri == node.link

            player = await gateway.channel.connect(cls=mafic.Player)
            assert gateway.ops == [(GUILD, gateway.channel.id)]
            # A media-folder file by its identifier: mafic's fetch_tracks puts a search prefix on
            # anything that is not an http(s) link, and its play() takes an identifier as it is.
            queue.append(link)
            await player.play("tone-330.mp3")
            await standin.wait(lambda s: s["packets"] >= 50 and abs((s["dominant_hz"] or 0) - 330) < 10, what="the 330 Hz file")
            assert player.current is not None and player.current.title == "tone-330.mp3" and player.current.source == "local"
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 880) < 10, timeout=8, what="the link after the file")
            assert ("end", "tone-330.mp3", "finished") in events and ("start", "tone-880.mp3") in events, events
            # frameStats, from the engine's own counters: a player heard at every deadline sends
            # 3,000 frames a minute (stats every 2 s here, scaled to a minute), none nulled or late.
            def counted() -> tuple | None:
                frames = lavalink.stats and lavalink.stats.frame_stats
                return (frames.sent, frames.nulled, frames.deficit) if frames else None

            assert await until(lambda: counted() and abs(counted()[0] - 3_000) <= 150, 8), counted()
            assert counted()[1:] == (0, 0), counted()

            async def pitch(value: float) -> None:
                await player.add_filter(mafic.Filter(timescale=mafic.Timescale(pitch=value)), label="pitch", fast_apply=True)

            await hear_the_controls(
                standin, volume=player.set_volume, pitch=pitch, no_filters=lambda: player.clear_filters(fast_apply=True),
                seek=player.seek, position=lambda: player.position, pause=player.pause)
            # Lavalink's ping: the voice gateway's heartbeat round trip (the stand-in answers 40 ms late).
            assert await until(lambda: player.connected and 40 <= player.ping < 1_000, 3), (player.connected, player.ping)

            # The bot's process ends without a word (its socket closes; nothing is destroyed) and
            # starts again: Discord still shows it in the channel, and mafic, given the session id
            # the bot kept, resumes: its player comes back from GET players, and the stand-in's
            # stream never broke.
            heard = standin.stream()
            await lavalink.close()
            async with MainGateway(standin, in_channel=True) as restarted:
                pool = mafic.NodePool(restarted.client)
                again = await pool.create_node(host="127.0.0.1", port=node.port, label="tonearm-restarted",
                                               password=PASSWORD, resuming_session_id=session)
                assert again.session_id == session
                back = restarted.client.get_guild(GUILD).voice_client
                assert isinstance(back, mafic.Player) and back.current is not None and back.current.title == "tone-880.mp3"
                after = await standin.wait(lambda s: s["packets"] > heard["packets"] + 100, timeout=5, what="the music after the restart")
                assert after["first_at"] == heard["first_at"] and after["sequence_breaks"] == 0, after
                assert await until(lambda: back.connected, 3)

                await back.stop()
                stopping = await standin.wait(lambda s: s["silence_frames"] >= 10, timeout=3, what="silence frames on stop")
                await asyncio.sleep(1)
                assert standin.stream()["packets"] == stopping["packets"], "packets kept coming after stop"
                await pool.close()

    asyncio.run(scenario())
