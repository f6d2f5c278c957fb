"""Tonearm's plugin (docs/lavalink.md#tonearms-plugin), reached from lavalink.py 5.11.1, unchanged,
the way its documentation says a bot reaches a server's plugins: `Node.request` for the plugin's
routes, and a `Filter` of the bot's own for its `pluginFilters`. Judged at the stand-in voice
server (the tone, its level) and by the listeners' link (the Ogg stream decoded)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.error
import urllib.request

import lavalink
from lavalink.filters import Filter, Timescale

from conftest import GUILD, PASSWORD, until
from test_lavalink_py import connect, join


class TonearmFilter(Filter):
    """What a bot writes to send Tonearm's settings as a plugin filter with lavalink.py."""

    def __init__(self, **values) -> None:
        super().__init__(values)

    def update(self, **values) -> None:
        self.values.update(values)

    def serialize(self) -> dict:
        return {"pluginFilters": {"tonearm": self.values}}


class RawEvents:
    """Lavalink's events as they arrive (lavalink.py's IncomingWebSocketMessage). lavalink.py's own
    TrackStartEvent takes the track from its player (`current`), which has none for a track it
    did not start: it logs an assertion for those and goes on, and the raw message names it."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    @lavalink.listener(lavalink.IncomingWebSocketMessage)
    async def message(self, event: lavalink.IncomingWebSocketMessage) -> None:
        data = event.data
        if data.get("op") == "event" and data.get("type") in ("TrackStartEvent", "TrackEndEvent"):
            self.events.append((data["type"], data["track"]["info"]["title"], data.get("reason")))


def call(node, method: str, path: str, body=None) -> tuple[int, dict | None]:
    """A plain HTTP call with Lavalink's password, for the refusals: status and JSON body."""
    request = urllib.request.Request(f"http://127.0.0.1:{node.port}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": PASSWORD, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def dominant_hz_of_ogg(data: bytes) -> float:
    """The strongest frequency of an Ogg Opus stream's audio, decoded by ffmpeg."""
    import numpy
    pcm = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", "48000",
                          "pipe:1"], input=data, capture_output=True, check=True).stdout
    samples = numpy.frombuffer(pcm, dtype=numpy.int16).astype(float)[-48_000:]
    spectrum = numpy.abs(numpy.fft.rfft(samples * numpy.hanning(len(samples))))
    return float(numpy.argmax(spectrum) * 48_000 / len(samples))


def test_tonearms_plugin_through_lavalink_py(node, standin):
    async def scenario() -> None:
        hooks = RawEvents()
        client = connect(node, hooks)
        lavalink_node = client.node_manager.nodes[0]
        assert await until(lambda: lavalink_node.available), "lavalink.py never got `ready`"
        try:
            info = await lavalink_node.get_info()
            assert [p["name"] for p in info["plugins"]] == ["tonearm"], info["plugins"]

            player = client.player_manager.create(GUILD)
            await join(client, standin)
            base = f"sessions/{lavalink_node.session_id}/players/{GUILD}/tonearm"
            path = f"/v4/{base}"
            assert await until(lambda: call(node, "GET", path)[0] == 200, 5), call(node, "GET", path)

            # Tonearm's queue: two tracks, played one after the other with nothing asked by the
            # bot. The first ends `replaced` (mayStartNext false), so lavalink.py's own (empty)
            # queue does not stop the second.
            queued = await lavalink_node.request(
                "POST", base + "/queue", json={"tracks": [{"identifier": "tone-330.mp3"}, {"identifier": "tone-440.mp3"}]})
            titles = [track["info"]["title"] for track in queued["queued"]]
            assert len(titles) == 2, queued
            await standin.wait(lambda s: s["packets"] >= 25 and abs((s["dominant_hz"] or 0) - 330) < 10, what="the queue's first track")
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 440) < 10, timeout=8, what="the queue's second track")
            assert await until(lambda: ("TrackStartEvent", titles[1], None) in hooks.events, 3), hooks.events
            assert hooks.events == [("TrackStartEvent", titles[0], None), ("TrackEndEvent", titles[0], "replaced"),
                                    ("TrackStartEvent", titles[1], None)], hooks.events
            await asyncio.sleep(2)
            assert abs(standin.stream()["dominant_hz"] - 440) < 10, "the queue's second track did not play on"
            overview = await lavalink_node.request("GET", base)
            assert overview["queue"] == [] and overview["normalize"] is False, overview

            # A track queued and taken out again: the waiting tracks go, what plays goes on.
            await lavalink_node.request("POST", base + "/queue", json={"tracks": [{"identifier": "tone-330.mp3"}]})
            assert len((await lavalink_node.request("GET", base))["queue"]) == 1
            assert (await lavalink_node.request("DELETE", base + "/queue"))["queue"] == []

            # The listeners' link: the guild as Ogg Opus, heard with the listen token alone.
            listen = overview["listen"]
            assert listen["ogg"].startswith(f"/listen/{GUILD}.ogg?token="), listen
            stream = urllib.request.urlopen(f"http://127.0.0.1:{node.port}{listen['ogg']}", timeout=10)
            data = b""
            while len(data) < 40_000:
                data += stream.read(4_096)
            stream.close()
            assert data.startswith(b"OggS")
            assert abs(dominant_hz_of_ogg(data) - 440) < 10

            # Settings as a plugin filter: normalisation on brings the quiet tone up towards
            # -14 LUFS. They are the guild's settings, not filters: filters given later without
            # them (lavalink.py sends all its filters each time) leave them as they are.
            quiet = standin.stream()["level_dbfs"]
            await player.set_filter(TonearmFilter(normalize=True))
            louder = await standin.wait(lambda s: s["level_dbfs"] > quiet + 3, timeout=10, what="normalisation on")
            await player.remove_filter(TonearmFilter)
            await player.set_filter(Timescale(pitch=1.5))
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 660) < 10, timeout=3, what="a pitch beside the settings")
            shown = await lavalink_node.get_player(GUILD)
            assert shown["filters"]["pluginFilters"]["tonearm"] == {"normalize": True, "cue": False, "crossfadeMs": 0}, shown
            assert standin.stream()["level_dbfs"] > quiet + 3
            await player.clear_filters()
            # The same settings through the plugin's route.
            now = await lavalink_node.request("PATCH", base, json={"normalize": False, "cue": True, "crossfadeMs": 1_500})
            assert (now["normalize"], now["cue"], now["crossfadeMs"]) == (False, True, 1_500), now
            await standin.wait(lambda s: s["level_dbfs"] < louder["level_dbfs"] - 3, timeout=5, what="normalisation off")

            # A layer: 880 Hz over the music, which ducks under it, then the music back.
            layer = await lavalink_node.request("POST", base + "/layers", json={"identifier": "tone-880.mp3", "duckDb": 30})
            assert layer["duckDb"] == 30 and layer["layerId"] > 0, layer
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 880) < 10, timeout=5, what="the layer")
            assert call(node, "DELETE", f"{path}/layers/{layer['layerId']}")[0] == 204
            await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 440) < 10, timeout=5, what="the music after the layer")

            # Refusals, in Lavalink's error body; the guild plays on.
            for method, where, body, status in [
                ("PATCH", path, {"crossfadeMs": 99_999}, 400), ("PATCH", path, {"normalise": True}, 400),
                ("PATCH", path, {"normalize": 1}, 400), ("POST", path + "/queue", {"tracks": []}, 400),
                ("POST", path + "/queue", {"tracks": [{"encoded": "not a track"}]}, 400),
                ("POST", path + "/layers", {"identifier": "tone-880.mp3", "volume": 5_000}, 400),
                ("DELETE", path + "/layers/123456", None, 404),
                ("GET", f"/v4/sessions/{lavalink_node.session_id}/players/1234/tonearm", None, 404),
                ("GET", f"/v4/sessions/nope/players/{GUILD}/tonearm", None, 404),
            ]:
                got, answer = call(node, method, where, body)
                assert got == status and answer["status"] == status and answer["message"] and answer["path"], (where, body, got, answer)
            # A filter that is not Tonearm's is refused whole, nothing of it applied.
            refused = call(node, "PATCH", f"/v4/sessions/{lavalink_node.session_id}/players/{GUILD}",
                           {"filters": {"pluginFilters": {"tonearm": {"crossfadeMs": -1}}}})
            assert refused[0] == 400, refused
            assert (await lavalink_node.request("GET", base))["crossfadeMs"] == 1_500
            await asyncio.sleep(1)
            assert abs(standin.stream()["dominant_hz"] - 440) < 10
        finally:
            await client.close()

    asyncio.run(scenario())
