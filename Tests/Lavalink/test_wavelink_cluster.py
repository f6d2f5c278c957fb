"""wavelink 3.5.2, unchanged, against a cluster of four pairs behind one round-robin address:
its WebSocket reaches one Router, each REST call whichever comes next, and its player runs at the
pair that plays the guild. The Router that has the bot's WebSocket is killed, the pair that plays
the guild is stopped, then the next one killed: the bot's code does nothing, and the music goes on
or comes back each time, at the stand-in voice server. wavelink's own queue goes on after them
(the link's TrackEndEvent came through), and the controls still reach the guild."""

from __future__ import annotations

import asyncio
import functools
import http.server
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import wavelink
import discord

from cluster import LavalinkCluster
from conftest import PASSWORD, USER, falls_silent, until, wavelink_player


@pytest.fixture
def lavalink_cluster(tmp_path: Path, standin):
    media = tmp_path / "media"
    media.mkdir()
    for frequency, seconds in ((880, 30), (330, 8)):
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"sine=f={frequency}:d={seconds}",
                        str(media / f"tone-{frequency}.mp3")], check=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(media))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running = LavalinkCluster(tmp_path, pairs=4, environment={
        "TONEARM_MEDIA_DIR": str(media), "TONEARM_BOT_TOKEN": "lavalink-cluster-test",
        "TONEARM_YTDLP": str(Path(__file__).resolve().parent.parent / "Fixtures/fake-yt-dlp"),
        "TONEARM_VOICE_CA_FILE": standin.ca, "TONEARM_DAVE_SOCKET": standin.dave_socket, "TONEARM_LAVALINK_PASSWORD": PASSWORD,
        "TONEARM_LAVALINK_PLAYER_UPDATE_INTERVAL": "1", "TONEARM_ALLOW_PRIVATE_SOURCES": "true", "TONEARM_NORMALIZE": "false",
    })
    running.link = f"http://127.0.0.1:{server.server_address[1]}/tone-880.mp3"
    try:
        yield running
    finally:
        server.shutdown()
        running.stop()


@pytest.mark.parametrize("home_plays", [False, True], ids=["websocket-elsewhere", "websocket-at-the-guilds-pair"])
def test_wavelink_plays_through_a_cluster_whose_pairs_fail(lavalink_cluster, standin, home_plays):
    cluster = lavalink_cluster

    async def scenario() -> None:
        client = discord.Client(intents=discord.Intents.none())
        await client.__aenter__()
        client._connection.user = SimpleNamespace(id=USER)
        events: list = []

        async def ended(payload: wavelink.TrackEndEventPayload) -> None:
            events.append(("end", payload.track.title, payload.reason))

        async def started(payload: wavelink.TrackStartEventPayload) -> None:
            events.append(("start", payload.track.title))

        client.on_wavelink_track_start, client.on_wavelink_track_end = started, ended
        node = wavelink.Node(uri=cluster.url, password=PASSWORD, resume_timeout=30)
        await wavelink.Pool.connect(nodes=[node], client=client)
        assert await until(lambda: node.status == wavelink.NodeStatus.CONNECTED), node.status
        home = cluster.pairs[cluster.balancer.went[0]]  # wavelink's first connection is its WebSocket
        try:
            link = (await wavelink.Playable.search(cluster.link))[0]
            file = (await wavelink.Playable.search("tone-330.mp3", source=None))[0]
            player = await wavelink_player(client, standin)
            player.autoplay = wavelink.AutoPlayMode.partial
            player.queue.put(file)
            await player.play(link)
            await standin.wait(lambda s: s["packets"] >= 50 and abs((s["dominant_hz"] or 0) - 880) < 10, what="the 880 Hz link")

            # Three faults, the bot's code doing nothing:
            # - the Router that has the bot's WebSocket is killed, when it is not the pair that plays
            #   the guild: wavelink resumes its session at the next Router by itself, and the guild
            #   plays on unbroken;
            # - the pair that plays the guild is stopped (SIGTERM): it hands the guild over, and the
            #   player runs on at the pair that takes it on (a new voice connection there, a new
            #   stream at the stand-in);
            # - the pair that plays it then is killed: the same, after the lease runs out.
            owner = cluster.owner()
            assert owner is not None, [p.owns() for p in cluster.pairs if p.alive]
            # Its TrackStartEvent came from the pair that plays the guild (through the home's feed
            # when that is another pair).
            assert await until(lambda: ("start", "tone-880.mp3") in events, 5), events
            if home_plays and home is not owner:
                # wavelink resumes its session at the Router of the pair that plays the guild, which
                # then fails with its WebSocket on it.
                cluster.balancer.next, since = owner.index, len(cluster.balancer.went)
                await node._websocket.socket.close()
                # Its new WebSocket is the first connection after the drop; REST calls may follow.
                assert await until(lambda: node.status == wavelink.NodeStatus.CONNECTED and cluster.balancer.went[since:since + 1] == [owner.index], 10), (
                    node.status, cluster.balancer.went[since:], owner.index)
                home = owner
            heard = []
            for what in ("home", "owner stopped", "owner killed"):
                playing = cluster.owner()
                assert playing is not None, [p.owns() for p in cluster.pairs if p.alive]
                pair = playing if what.startswith("owner") else home
                if what == "home" and pair is playing:
                    continue
                before = standin.stream()
                began = time.time()
                pair.terminate() if what == "owner stopped" else pair.kill()
                if pair is playing:
                    again = await standin.wait(
                        lambda s: s["first_at"] > before["first_at"] and s["packets"] >= 25 and abs((s["dominant_hz"] or 0) - 880) < 10,
                        timeout=15, what=f"the link again after the {what}")
                    heard.append((what, f"new stream {again['first_at'] - before['last_at']:.2f} s after the last packet"))
                else:
                    again = await standin.wait(lambda s: s["last_at"] > began + 3, timeout=10, what=f"the link on after the {what} was killed")
                    assert again["first_at"] == before["first_at"] and again["sequence_breaks"] == 0, again
                    assert abs((again["dominant_hz"] or 0) - 880) < 10, again
                    heard.append((what, f"unbroken, longest gap {again['gap_ms_max']:.0f} ms"))
                assert await until(lambda: node.status == wavelink.NodeStatus.CONNECTED, 15), (what, node.status)
                assert not [e for e in events if e[0] == "end"], events  # the link goes on: no TrackEndEvent
            print(f"WebSocket at pair{home.index}, guild first at pair{owner.index}: {heard}")
            assert await until(lambda: node.status == wavelink.NodeStatus.CONNECTED, 15), node.status

            # The link ends where it plays now: its TrackEndEvent reaches wavelink, whose queue
            # plays the file next (a REST call through any Router, to the pair that plays the guild).
            try:
                await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 330) < 10, timeout=30, what="the file after the link")
            except AssertionError as error:
                raise AssertionError(f"{error}; wavelink's events: {events}") from None
            assert ("end", "tone-880.mp3", "finished") in events, events

            await player.pause(True)
            await falls_silent(standin, "pause", frames=5, settle=0.5)
        finally:
            await wavelink.Pool.close()
            await client.close()

    asyncio.run(scenario())
