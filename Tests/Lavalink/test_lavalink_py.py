"""lavalink.py 5.11.1, unchanged, against Tonearm's Lavalink v4 API: driven as its documentation
shows a bot using it (a Client, a node, the two voice events of Discord's main gateway handed to
`voice_update_handler`, a DefaultPlayer with its own queue), with the real engine and Router.
Everything is judged at the stand-in voice server: the tone heard, its level, silence."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import urllib.request

import lavalink
from lavalink import LoadType
from lavalink.filters import Timescale, Volume

from conftest import CHANNEL, GUILD, PASSWORD, REPO, USER, hear_the_controls, until


class Hooks:
    def __init__(self) -> None:
        self.events: list = []
        self.updates: list[float] = []

    @lavalink.listener(lavalink.TrackStartEvent)
    async def started(self, event: lavalink.TrackStartEvent) -> None:
        self.events.append(("start", event.track.title))

    @lavalink.listener(lavalink.TrackEndEvent)
    async def ended(self, event: lavalink.TrackEndEvent) -> None:
        self.events.append(("end", event.track.title if event.track else None, str(event.reason.value)))

    @lavalink.listener(lavalink.PlayerUpdateEvent)
    async def updated(self, event: lavalink.PlayerUpdateEvent) -> None:
        self.updates.append(time.monotonic())

    @lavalink.listener(lavalink.NodeReadyEvent)
    async def ready(self, event: lavalink.NodeReadyEvent) -> None:
        self.events.append(("ready", event.resumed))


def connect(node, hooks: Hooks) -> lavalink.Client:
    """A lavalink.py client with `hooks`, its node the Router."""
    client = lavalink.Client(USER)
    client.add_event_hooks(hooks)
    client.add_node("127.0.0.1", node.port, PASSWORD, "us", "tonearm")
    return client


async def join(client: lavalink.Client, standin) -> None:
    """The two voice events of Discord's main gateway for the guild, handed to lavalink.py."""
    await client.voice_update_handler({"t": "VOICE_STATE_UPDATE", "d": {
        "guild_id": str(GUILD), "user_id": str(USER), "channel_id": str(CHANNEL), "session_id": "main-gateway-session"}})
    await client.voice_update_handler({"t": "VOICE_SERVER_UPDATE", "d": {
        "guild_id": str(GUILD), "token": "voice-token", "endpoint": standin.endpoint}})


def test_lavalink_py_plays_through_tonearm(node, standin):
    logging.basicConfig(level=logging.INFO)
    async def scenario() -> None:
        client = lavalink.Client(USER)
        hooks = Hooks()
        client.add_event_hooks(hooks)
        lavalink_node = client.add_node("127.0.0.1", node.port, PASSWORD, "us", "tonearm")
        assert await until(lambda: lavalink_node.available), "lavalink.py never got `ready`"
        try:
            # Loading: a file of the media folder, a search, an http(s) link, nothing.
            result = await client.get_tracks("tone-330.mp3")
            assert result.load_type == LoadType.TRACK, result
            short = result.tracks[0]
            assert short.source_name == "local" and 2_900 <= short.duration <= 3_100, short.raw
            search = await client.get_tracks("ytsearch:tonearm lofi")
            assert search.load_type == LoadType.SEARCH and len(search.tracks) == 10
            assert search.tracks[0].title == "tonearm lofi 1" and search.tracks[0].source_name == "youtube"
            soundcloud = await client.get_tracks("scsearch:tonearm")
            assert soundcloud.load_type == LoadType.SEARCH and soundcloud.tracks[0].source_name == "soundcloud"
            assert soundcloud.tracks[0].uri == "https://soundcloud.com/tonearm/fake0"
            link = (await client.get_tracks(node.link)).tracks[0]
            assert link.source_name == "http" and link.uri == node.link
            assert (await client.get_tracks("no-such-file.mp3")).load_type in (LoadType.EMPTY, LoadType.ERROR)
            # lavalink.py decodes the tracks Tonearm encodes (lavaplayer's format) itself.
            decoded = lavalink.decode_track(link.track)
            assert decoded.uri == node.link and decoded.source_name == "http" and decoded.title == link.title

            player = client.player_manager.create(GUILD)
            await join(client, standin)

            # Two tracks in lavalink.py's own queue: the second starts on the first's TrackEndEvent.
            player.add(track=short, requester=0)
            player.add(track=link, requester=0)
            await player.play()
            await standin.wait(lambda s: s["packets"] >= 50 and abs((s["dominant_hz"] or 0) - 330) < 10, what="the 330 Hz file")
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 880) < 10, timeout=8, what="the link after the file")
            assert ("end", short.title, "finished") in hooks.events and ("start", link.title) in hooks.events, hooks.events

            # playerUpdate every second (configured), with the position moving.
            before = len(hooks.updates)
            await asyncio.sleep(3.2)
            assert len(hooks.updates) - before >= 3, hooks.updates[-6:]
            assert player.position > 500

            await hear_the_controls(
                standin, volume=player.set_volume, pitch=lambda p: player.set_filter(Timescale(pitch=p)),
                no_filters=player.clear_filters, seek=player.seek, position=lambda: player.position, pause=player.set_pause)

            # Lavalink's volume filter, a factor on the player's volume: 0.5 is 6 dB down, and
            # the player's own volume stays what the client set.
            loud = standin.stream()["level_dbfs"]
            await player.set_filter(Volume(0.5))
            quiet = await standin.wait(lambda s: s["level_dbfs"] < loud - 5, timeout=3, what="the volume filter at 0.5")
            assert abs(quiet["level_dbfs"] - (loud - 6.02)) < 1.5, (loud, quiet["level_dbfs"])
            shown = await lavalink_node.get_player(GUILD)
            assert shown["volume"] == 100 and shown["filters"].get("volume") == 0.5, shown
            await player.clear_filters()
            await standin.wait(lambda s: s["level_dbfs"] > loud - 1, timeout=3, what="the volume filter removed")

            # The WebSocket drops, with resuming off: the session ends with its players, as on
            # Lavalink. lavalink.py connects again at once (without its session's id: its reconnect
            # reuses the first connection's headers) and moves its player to the new session itself
            # (voice, track, position): the guild plays on, from where it was.
            dropped = standin.stream()
            await lavalink_node._transport._ws.close()
            assert await until(lambda: hooks.events.count(("ready", False)) == 2, 10), hooks.events
            again = await standin.wait(lambda s: s["first_at"] > dropped["first_at"] and s["packets"] >= 50, timeout=5,
                                       what="the music after the socket dropped")
            assert abs(again["dominant_hz"] - 880) < 10
            print(f"lavalink.py: socket dropped without resuming, silent {again['first_at'] - dropped['last_at']:.2f} s")

            # A bot that restarts resumes its session by id (add_node's session_id): `ready` says
            # resumed, the player is still there, and the music never stopped meanwhile.
            await lavalink_node.update_session(resuming=True, timeout=30)
            session_id = lavalink_node.session_id
            heard = standin.stream()
            await client.close()
            client = lavalink.Client(USER)
            hooks = Hooks()
            client.add_event_hooks(hooks)
            lavalink_node = client.add_node("127.0.0.1", node.port, PASSWORD, "us", "tonearm", session_id=session_id)
            assert await until(lambda: ("ready", True) in hooks.events, 10), hooks.events
            assert (await lavalink_node.get_player(GUILD))["track"]["info"]["uri"] == node.link
            after = await standin.wait(lambda s: s["packets"] > heard["packets"] + 50, timeout=3, what="the music after resuming")
            assert after["first_at"] == heard["first_at"] and after["sequence_breaks"] == 0, after

            # Stop: silence frames, then nothing; the player has no track.
            await lavalink_node.update_player(guild_id=GUILD, encoded_track=None)
            stopping = await standin.wait(lambda s: s["silence_frames"] >= 5, timeout=3, what="silence frames on stop")
            await asyncio.sleep(1)
            assert standin.stream()["packets"] == stopping["packets"], "packets kept coming after stop"
            assert (await lavalink_node.get_player(GUILD))["track"] is None
            await lavalink_node.destroy_player(GUILD)
        finally:
            await client.close()

    asyncio.run(scenario())


def test_a_stalled_link_is_a_track_stuck_event_and_the_queue_moves_on(node, standin, tmp_path):
    """A link whose server stops sending (for 12 s, once, 3 s of sound in): once the
    read-ahead has played out and a second has passed without a frame (TONEARM_STUCK_THRESHOLD_MS
    in the tests), lavalink.py gets TrackStuckEvent with that threshold, once. Tonearm does not stop
    the player (as Lavalink does not); lavalink.py's DefaultPlayer plays the next track of its
    queue on it, which the stand-in hears."""
    link = tmp_path / "media" / "tone-880.mp3"  # 30 s: a tenth of its bytes is 3 s of it
    server = subprocess.Popen([sys.executable, str(REPO / "Tests/Fixtures/media_server.py"), "--root", str(link.parent),
                               "--stall-at", str(link.stat().st_size // 10), "--stall-seconds", "12", "--stall-every-whole"],
                              stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())

    class Stuck(Hooks):
        @lavalink.listener(lavalink.TrackStuckEvent)
        async def stuck(self, event: lavalink.TrackStuckEvent) -> None:
            self.events.append(("stuck", event.track.title, event.threshold, time.monotonic()))

    async def scenario() -> None:
        hooks = Stuck()
        client = connect(node, hooks)
        try:
            stalling = (await client.get_tracks(f"http://127.0.0.1:{port}/tone-880.mp3")).tracks[0]
            short = (await client.get_tracks("tone-330.mp3")).tracks[0]
            player = client.player_manager.create(GUILD)
            await join(client, standin)
            player.add(track=stalling, requester=0)
            player.add(track=short, requester=0)
            await player.play()
            started = time.monotonic()
            await standin.wait(lambda s: s["packets"] >= 50 and abs((s["dominant_hz"] or 0) - 880) < 10, what="the link")
            if not await until(lambda: any(e[0] == "stuck" for e in hooks.events), 15):
                asked = urllib.request.urlopen(f"http://127.0.0.1:{port}/requests", timeout=5).read().decode()
                raise AssertionError(f"no TrackStuckEvent: {hooks.events}; the server was asked: {asked!r}; heard {standin.stream()}")
            stuck = next(e for e in hooks.events if e[0] == "stuck")
            assert stuck[1:3] == ("tone-880.mp3", 1_000) and 3 < stuck[3] - started < 9, (stuck, started)
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 330) < 10, timeout=5, what="the next track after the stall")
            assert [e[0] for e in hooks.events].count("stuck") == 1, hooks.events
        finally:
            await client.close()
            server.kill()
            server.wait()

    asyncio.run(scenario())


def test_end_time_ends_the_track_finished_and_the_queue_moves_on(node, standin):
    """`endTime` (lavalink.py's `end_time`): the 30 s link ends `finished` 2 s in, as if it ran
    out there, and lavalink.py plays the next track of its queue, heard at the stand-in."""
    class Timed(Hooks):
        @lavalink.listener(lavalink.TrackEndEvent)
        async def ended(self, event: lavalink.TrackEndEvent) -> None:
            self.events.append(("end", event.track.title if event.track else None, str(event.reason.value), time.monotonic()))

    async def scenario() -> None:
        hooks = Timed()
        client = connect(node, hooks)
        try:
            link = (await client.get_tracks(node.link)).tracks[0]
            short = (await client.get_tracks("tone-330.mp3")).tracks[0]
            player = client.player_manager.create(GUILD)
            await join(client, standin)
            player.add(track=short, requester=0)
            await player.play(link, end_time=2_000)
            await standin.wait(lambda s: s["packets"] >= 25 and abs((s["dominant_hz"] or 0) - 880) < 10, what="the link")
            started = time.monotonic()
            assert await until(lambda: any(e[0] == "end" for e in hooks.events), 5), hooks.events
            end = next(e for e in hooks.events if e[0] == "end")
            assert end[1:3] == ("tone-880.mp3", "finished") and 0.5 < end[3] - started < 2.5, (end, started)
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 330) < 10, timeout=5, what="the next track after endTime")
        finally:
            await client.close()

    asyncio.run(scenario())


def test_hostile_requests_get_lavalinks_errors_while_a_guild_plays(node, standin):
    """Every Lavalink route given what no client should send: each answered with Lavalink's error
    body and the right status, while a guild plays on at the stand-in without a gap, the engine's
    pid and the Router's link unchanged."""
    import aiohttp

    async def scenario() -> None:
        auth = {"Authorization": PASSWORD, "User-Id": str(USER), "Client-Name": "hostile/1.0"}
        base = f"http://127.0.0.1:{node.port}"
        engine_pid = node.engine.pid
        async with aiohttp.ClientSession() as http:
            socket = await http.ws_connect(base + "/v4/websocket", headers=auth)
            session = (await socket.receive_json())["sessionId"]
            players = f"{base}/v4/sessions/{session}/players"
            loaded = await (await http.get(base + "/v4/loadtracks", params={"identifier": "tone-440.mp3"}, headers=auth)).json()
            voice = {"token": "voice-token", "endpoint": standin.endpoint, "sessionId": "s", "channelId": str(CHANNEL)}
            response = await http.patch(f"{players}/{GUILD}", json={"voice": voice, "track": {"encoded": loaded["data"]["encoded"]}},
                                        headers=auth)
            assert response.status == 200, await response.text()
            before = await standin.wait(lambda s: s["packets"] >= 50, what="the bystander guild")

            async def refused(method: str, url: str, status: int, headers=auth, **kwargs) -> None:
                async with http.request(method, url, headers=headers, **kwargs) as answer:
                    body = await answer.json(content_type=None)
                    assert answer.status == status, (method, url, kwargs, answer.status, body)
                    assert body["status"] == status and body["error"] and body["message"] and body["path"], body
                    assert isinstance(body["timestamp"], int)

            other = f"{players}/2000"
            for body in ({"volume": 1e30}, {"volume": -5}, {"position": -1}, {"paused": "no"}, {"track": {"encoded": "AAAA"}},
                         {"track": {"encoded": "QAAAjQ" + "A" * 500}}, {"filters": {"equalizer": [{"band": 99, "gain": 9}]}},
                         {"voice": {**voice, "endpoint": "evil.example/../x"}}, {"voice": {**voice, "channelId": "not digits"}},
                         {"endTime": 0}, {"track": {"identifier": ""}}):
                await refused("PATCH", other, 400, json=body)
            await refused("PATCH", other, 400, data=b"{not json")
            await refused("PATCH", other, 400, data=b"[1,2]")
            await refused("PATCH", f"{players}/{'9' * 25}", 400, json={})
            await refused("PATCH", f"{players}/a%20b", 400, json={})
            await refused("PATCH", f"{base}/v4/sessions/nope/players/{GUILD}", 404, json={"volume": 5})
            await refused("GET", f"{players}/3000", 404)
            await refused("DELETE", f"{players}/3000", 404)
            await refused("PATCH", f"{base}/v4/sessions/{session}", 400, json={"timeout": -1})
            await refused("PATCH", f"{base}/v4/sessions/{session}", 400, json={"resuming": 1})
            await refused("GET", f"{base}/v4/decodetrack?encodedTrack=%00%01", 400)
            await refused("GET", f"{base}/v4/decodetrack", 400)
            await refused("POST", f"{base}/v4/decodetracks", 400, data=b'{"a":1}')
            await refused("GET", f"{base}/v4/loadtracks", 400)
            await refused("GET", f"{base}/v4/info", 401, headers={})
            await refused("GET", f"{base}/v4/info", 401, headers={"Authorization": PASSWORD + "x"})
            nameless = await http.ws_connect(base + "/v4/websocket", headers={"Authorization": PASSWORD})
            assert (await nameless.receive()).type == aiohttp.WSMsgType.CLOSE and nameless.close_code == 4400
            with_bad_load = await (await http.get(base + "/v4/loadtracks", params={"identifier": "../../etc/passwd"}, headers=auth)).json()
            assert with_bad_load["loadType"] in ("empty", "error"), with_bad_load

            after = await standin.wait(lambda s: s["packets"] >= before["packets"] + 100, what="the bystander playing on")
            assert after["first_at"] == before["first_at"] and after["sequence_breaks"] == 0 and after["gap_ms_max"] < 100, after
            assert abs(after["dominant_hz"] - 440) < 10
            assert node.engine.pid == engine_pid and node.engine.poll() is None
            assert '"connected":true' in node.health()
            await socket.close()

    asyncio.run(scenario())
