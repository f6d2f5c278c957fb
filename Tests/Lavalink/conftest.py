"""What every Lavalink client's test needs: the real engine and Router with Lavalink's API on
(the bridge's `Cluster`, TONEARM_LAVALINK_PASSWORD set), the stand-in Discord voice server
(Tests/Fixtures/voice_server.py) that hears what Tonearm sends, requiring DAVE as Discord does,
with tonearm-dave beside the Router, and a plain HTTP server for a link to play. Everything is
judged at the stand-in: the tone, its level, silence, and every frame opened with DAVE."""

from __future__ import annotations

import asyncio
import functools
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import discord
import pytest
from discord.user import ClientUser

REPO = Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("bridge_conftest", REPO / "bridges/discord/tests/conftest.py")
bridge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bridge)

PASSWORD = "youshallnotpass"
GUILD, CHANNEL, USER = 41771983423143937, 127121515262115840, 104694319306248192


class StandIn:
    """The stand-in voice server, requiring DAVE as Discord does, and what it heard; tonearm-dave
    (bridges/dave) runs beside the Router for the voice connections it makes."""

    def __init__(self) -> None:
        # A heartbeat a second, each answered 40 ms later: a voice server at a distance, whose
        # round trip Lavalink's `ping` shows.
        self.process = subprocess.Popen([sys.executable, str(REPO / "Tests/Fixtures/voice_server.py"), "--dave", "--dave-required",
                                         "--heartbeat-ms", "1000", "--ack-delay-ms", "40"], stdout=subprocess.PIPE)
        ready = json.loads(self.process.stdout.readline())
        self.endpoint = f"localhost:{ready['ws_port']}"
        self.control = ready["control_port"]
        self.ca = ready["ca"]
        request = urllib.request.Request(f"http://127.0.0.1:{self.control}/channel?server_id={GUILD}&channel_id={CHANNEL}", method="POST")
        urllib.request.urlopen(request, timeout=5).read()
        # A short path of its own: a Unix socket's path is limited to 107 bytes.
        self.dave_socket = os.path.join(tempfile.mkdtemp(prefix="tonearm-dave-"), "dave.sock")
        self.dave = subprocess.Popen([sys.executable, str(REPO / "bridges/dave/tonearm_dave.py"), "--socket", self.dave_socket],
                                     stdout=subprocess.PIPE)
        self.dave.stdout.readline()

    def report(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.control}/report", timeout=5) as response:
            return json.load(response)

    def stream(self) -> dict:
        """The stream heard last (the newest voice connection's)."""
        streams = self.report()["streams"]
        return max(streams.values(), key=lambda s: s["first_at"]) if streams else {}

    async def wait(self, condition, timeout: float = 10, what: str = "") -> dict:
        """The newest stream once `condition` holds for it; the client's event loop runs meanwhile."""
        deadline = time.monotonic() + timeout
        stream = {}
        while time.monotonic() < deadline:
            stream = self.stream()
            if stream and condition(stream):
                return stream
            await asyncio.sleep(0.1)
        raise AssertionError(f"the stand-in never heard {what}: {stream}")

    def stop(self) -> None:
        for process in (self.process, self.dave):
            process.kill()
            process.wait()


class MainGateway:
    """The smallest stand-in for Discord's main gateway a voice protocol needs. `client` is a real
    discord.py Client whose cache holds what READY and GUILD_CREATE would put there: the bot's user
    and a guild with a voice channel and the bot as its member. Its op 4 (`voice_state`, sent by
    `Guild.change_voice_state`) is answered as Discord answers it: VOICE_STATE_UPDATE and, on a
    join, VOICE_SERVER_UPDATE with the stand-in's endpoint, both through discord.py's own parsers,
    which hand them to the channel's voice protocol (the client library's player)."""

    def __init__(self, standin: StandIn, *, in_channel: bool = False, client: discord.Client | None = None) -> None:
        self.standin = standin
        self.ops: list = []  # each op 4 the client sent: (guild id, channel id)
        self.client = client or discord.Client(intents=discord.Intents.none())
        self.in_channel = in_channel

    async def __aenter__(self) -> "MainGateway":
        await self.client.__aenter__()
        state = self.client._connection
        user = {"id": str(USER), "username": "tonearm-test", "discriminator": "0", "avatar": None, "bot": True}
        state.user = ClientUser(state=state, data=user)
        voice_states = [self._voice_state(CHANNEL, "main-gateway-session")] if self.in_channel else []
        state._add_guild_from_data({
            "id": str(GUILD), "name": "guild", "member_count": 1, "voice_states": voice_states,
            "roles": [{"id": str(GUILD), "name": "@everyone", "permissions": "0", "position": 0, "color": 0,
                       "hoist": False, "managed": False, "mentionable": False}],
            "channels": [{"id": str(CHANNEL), "type": 2, "name": "music", "position": 0, "permission_overwrites": [],
                          "bitrate": 64000, "user_limit": 0, "rtc_region": None}],
            "members": [{"user": user, "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False,
                         "mute": False, "flags": 0}],
        })
        state._get_websocket = lambda guild_id=None, shard_id=None: self
        self.client._ready.set()  # READY received
        return self

    async def __aexit__(self, *_) -> None:
        await self.client.close()

    @property
    def channel(self) -> discord.VoiceChannel:
        return self.client.get_channel(CHANNEL)

    @staticmethod
    def _voice_state(channel_id, session_id: str) -> dict:
        return {"guild_id": str(GUILD), "channel_id": str(channel_id) if channel_id else None, "user_id": str(USER),
                "session_id": session_id, "deaf": False, "mute": False, "self_deaf": False, "self_mute": False,
                "suppress": False, "self_video": False, "request_to_speak_timestamp": None}

    async def voice_state(self, guild_id, channel_id, self_mute: bool = False, self_deaf: bool = False) -> None:
        self.ops.append((guild_id, channel_id))
        state = self.client._connection

        def answer() -> None:
            state.parse_voice_state_update(self._voice_state(channel_id, "main-gateway-session"))
            if channel_id is not None:
                state.parse_voice_server_update({"token": "voice-token", "guild_id": str(GUILD), "endpoint": self.standin.endpoint})

        asyncio.get_running_loop().call_soon(answer)


async def wavelink_player(client: discord.Client, standin: StandIn):
    """A wavelink Player in the guild's voice channel, made as `channel.connect(cls=wavelink.Player)`
    makes it: the player asks the main gateway to join (op 4), which answers with the two voice
    events; the caller's `client` stands for discord.py's channel cache, this for the gateway."""
    import wavelink

    player: wavelink.Player | None = None

    async def change_voice_state(*, channel, self_mute: bool = False, self_deaf: bool = False) -> None:
        async def answer() -> None:
            await player.on_voice_state_update({"channel_id": str(CHANNEL), "session_id": "main-gateway-session"})
            await player.on_voice_server_update({"token": "voice-token", "guild_id": str(GUILD), "endpoint": standin.endpoint})
        asyncio.get_running_loop().create_task(answer())

    guild = SimpleNamespace(id=GUILD, change_voice_state=change_voice_state)
    channel = SimpleNamespace(id=CHANNEL, guild=guild, members=[], mention=f"<#{CHANNEL}>")
    client.get_channel = lambda _id: channel
    player = wavelink.Player(client, channel)
    await player.connect(timeout=10, reconnect=True)
    return player


async def falls_silent(standin: StandIn, what: str, frames: int, settle: float) -> None:
    """The stand-in hears `frames` silence frames (what Tonearm sends when the audio stops), then
    nothing more for `settle` s."""
    quiet = await standin.wait(lambda s: s["silence_frames"] >= frames, timeout=5, what=f"silence frames on {what}")
    await asyncio.sleep(settle)
    assert standin.stream()["packets"] == quiet["packets"], f"packets kept coming after {what}"


async def until(condition, timeout: float = 10) -> bool:
    """Whether `condition` came true within `timeout` s; the client's event loop runs meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.1)
    return False


async def hear_the_controls(standin: StandIn, *, volume, pitch, no_filters, seek, position, pause) -> None:
    """A client's controls, each judged by what the stand-in hears while an 880 Hz link plays:
    the volume at 50 % is 6 dB down; a `timescale` pitch of 1.5 puts it at 1,320 Hz; a seek moves
    the position; a pause sends five silence frames, then nothing, and a resume plays on."""
    loud = standin.stream()["level_dbfs"]
    await volume(50)
    quiet = await standin.wait(lambda s: s["level_dbfs"] < loud - 5, timeout=3, what="the volume at 50 %")
    assert abs(quiet["level_dbfs"] - (loud - 6.02)) < 1.5, (loud, quiet["level_dbfs"])
    await volume(100)

    await pitch(1.5)
    await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 1320) < 15, timeout=3, what="the pitch filter")
    await no_filters()
    await standin.wait(lambda s: abs((s["dominant_hz"] or 0) - 880) < 10, timeout=3, what="the filter removed")

    await seek(20_000)
    assert await until(lambda: position() >= 20_000, 3), position()
    await pause(True)
    paused = await standin.wait(lambda s: s["silence_frames"] >= 5, timeout=3, what="silence frames on pause")
    await asyncio.sleep(1)
    assert standin.stream()["packets"] == paused["packets"], "packets kept coming while paused"
    await pause(False)
    await standin.wait(lambda s: s["packets"] > paused["packets"] + 25, timeout=3, what="the music after resume")


@pytest.fixture
def standin():
    server = StandIn()
    try:
        yield server
        # Whatever the test heard came through DAVE: no frame arrived plain or unopenable.
        counts = [stream.get("dave") or {} for stream in server.report()["streams"].values()]
        assert all(c.get("plain", 0) == 0 and c.get("failed", 0) == 0 for c in counts), f"frames not opened with DAVE: {counts}"
    finally:
        server.stop()


@pytest.fixture
def node(tmp_path: Path, standin: StandIn):
    """The engine and Router, Lavalink's API on, playerUpdate every second, stats every 2 s; a 3 s tone-330.mp3
    in the media folder, and `link`: an http:// link to a 30 s 880 Hz tone."""
    running = bridge.Cluster(tmp_path, {
        "TONEARM_VOICE_CA_FILE": standin.ca, "TONEARM_DAVE_SOCKET": standin.dave_socket, "TONEARM_LAVALINK_PASSWORD": PASSWORD,
        "TONEARM_LAVALINK_PLAYER_UPDATE_INTERVAL": "1", "TONEARM_LAVALINK_STATS_INTERVAL": "2",
        "TONEARM_ALLOW_PRIVATE_SOURCES": "true", "TONEARM_STUCK_THRESHOLD_MS": "1000",
        "TONEARM_NORMALIZE": "false",
    })
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "sine=f=330:d=3",
                    str(tmp_path / "media" / "tone-330.mp3")], check=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "media"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running.link = f"http://127.0.0.1:{server.server_address[1]}/tone-880.mp3"
    yield running
    server.shutdown()
    running.stop()
