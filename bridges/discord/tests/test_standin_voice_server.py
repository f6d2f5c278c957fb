"""The stand-in voice server that judges Tonearm's own voice connection
(`Tests/Fixtures/voice_server.py`), held honest by discord.py's real voice client: discord.py 2.7's
`VoiceConnectionState` and `DiscordVoiceWebSocket` connect to it as to Discord (version 8 over
TLS, IP discovery, Select Protocol, Session Description, heartbeats), its `VoiceClient` sends a
440 Hz tone, and the stand-in opens and hears it. Only the main gateway is replaced: the two
events it would deliver (VOICE_STATE_UPDATE, VOICE_SERVER_UPDATE) are handed in directly.

So the stand-in speaks what a real client speaks, and a real client's packets pass its checks:
the tone, the sequence and timestamp continuity, the nonce counters, Speaking. With DAVE, the
stand-in plays Discord's part of the MLS group (`Tests/Fixtures/dave_standin.py`): discord.py's
davey session joins the stand-in's group by its welcome, commits a later listener's addition
itself, and every frame it sends is opened by the stand-in's listeners."""

from __future__ import annotations

import asyncio
import json
import math
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import discord
import discord.opus
from discord.voice_client import VoiceClient

from audio import load_opus

STANDIN = Path(__file__).resolve().parent.parent.parent.parent / "Tests" / "Fixtures" / "voice_server.py"
GUILD, CHANNEL, USER = 41771983423143937, 127121515262115840, 104694319306248192


def report(ready: dict) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ready['control_port']}/report", timeout=5) as response:
        return json.load(response)


class DirectVoiceClient(VoiceClient):
    """discord.py's VoiceClient whose main gateway is this test: joining the channel hands over
    the two events Discord would send, pointing at the stand-in."""

    endpoint = ""

    async def _join(self, state) -> None:
        # As from Discord: a moment after the request, one event after the other.
        await asyncio.sleep(0.05)
        await state.voice_state_update({"channel_id": str(CHANNEL), "session_id": "standin-session", "user_id": str(USER)})
        await asyncio.sleep(0.05)
        await state.voice_server_update({"token": "voice-token", "guild_id": str(GUILD), "endpoint": self.endpoint})

    def create_connection_state(self):
        state = super().create_connection_state()

        async def voice_connect(*, self_deaf: bool = False, self_mute: bool = False) -> None:
            # Only the first join: what Discord sends when a bot asks again for the channel it is
            # in is not modelled here.
            if state.state is discord.voice_state.ConnectionFlowState.disconnected:
                asyncio.get_running_loop().create_task(self._join(state))

        state._voice_connect = voice_connect  # type: ignore[method-assign]
        return state


def tone_frames(frequency: float, count: int) -> list[bytes]:
    load_opus()
    encoder = discord.opus.Encoder()
    frames = []
    for n in range(count):
        pcm = b"".join(
            struct.pack("<hh", value, value)
            for value in (int(8000 * math.sin(2 * math.pi * frequency * (n * 960 + i) / 48000)) for i in range(960))
        )
        frames.append(encoder.encode(pcm, 960))
    return frames


def control(ready: dict, path: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{ready['control_port']}{path}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


def run_voice_client(ready: dict, frames: list[bytes], *, midway=None) -> None:
    """discord.py's voice client connects to the stand-in, waits for DAVE when the call has it,
    and sends `frames` paced at 20 ms; `midway()` runs (on the event loop) after half of them."""

    async def scenario() -> None:
        client = discord.Client(intents=discord.Intents.none())
        client.loop = asyncio.get_running_loop()  # set by login(), which needs Discord
        client._connection.user = SimpleNamespace(id=USER)  # set by the main gateway's READY
        trust = ssl.create_default_context(cafile=ready["ca"])
        client.http._HTTPClient__session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust))
        guild = SimpleNamespace(id=GUILD, me=None)
        voice = DirectVoiceClient(client, SimpleNamespace(id=CHANNEL, guild=guild))
        voice.endpoint = f"localhost:{ready['ws_port']}"
        voice.loop = client.loop  # the client's connection state's loop, also set by login()
        try:
            await voice.connect(reconnect=False, timeout=15, self_deaf=False, self_mute=False)
            assert voice.is_connected()
            state = voice._connection
            if state.dave_protocol_version:
                deadline = time.monotonic() + 10
                while not state.can_encrypt and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert state.can_encrypt, "discord.py's DAVE session never became ready"
            await state.ws.speak(True)
            start = time.perf_counter()
            for n, frame in enumerate(frames):
                voice.send_audio_packet(frame, encode=False)
                if midway is not None and n == len(frames) // 2:
                    await asyncio.get_running_loop().run_in_executor(None, midway)
                await asyncio.sleep(max(0.0, start + (n + 1) * 0.02 - time.perf_counter()))
            await asyncio.sleep(1.2)  # two heartbeats at least
        finally:
            await voice._connection.disconnect(force=True, cleanup=False)
            await client.http._HTTPClient__session.close()

    asyncio.run(scenario())


def test_discord_pys_voice_client_is_heard_by_the_stand_in():
    process = subprocess.Popen([sys.executable, str(STANDIN), "--heartbeat-ms", "500"], stdout=subprocess.PIPE)
    try:
        ready = json.loads(process.stdout.readline())
        run_voice_client(ready, tone_frames(440, 150))

        heard = report(ready)
        kinds = [event["kind"] for event in heard["events"]]
        assert kinds[:4] == ["open", "identify", "discovery", "select"], kinds
        identify = next(event for event in heard["events"] if event["kind"] == "identify")
        assert identify["server_id"] == str(GUILD) and identify["user_id"] == str(USER)
        assert identify["max_dave_protocol_version"] >= 1, "discord.py 2.7 offers DAVE"
        select = next(event for event in heard["events"] if event["kind"] == "select")
        assert select["mode"] == "aead_xchacha20_poly1305_rtpsize", select
        heartbeats = [event for event in heard["events"] if event["kind"] == "heartbeat"]
        assert len(heartbeats) >= 2 and heartbeats[-1]["seq_ack"] >= 1, heartbeats
        assert any(event["kind"] == "speaking" and event["speaking"] == 1 for event in heard["events"])
        assert heard["unopened"] == 0
        (stream,) = heard["streams"].values()
        assert stream["packets"] >= 145, stream
        assert stream["sequence_breaks"] == 0 and stream["timestamp_breaks"] == 0, stream
        assert stream["counters_in_order"], stream
        assert abs(stream["dominant_hz"] - 440) < 10, stream
    finally:
        process.kill()
        process.wait()


def test_discord_pys_dave_session_takes_part_in_the_stand_ins_group():
    """DAVE both ways: discord.py (davey) joins the group the stand-in's listener founded, by the
    welcome it is sent (op 30); a second listener joins midway, and discord.py commits that
    addition itself (op 28, relayed as op 29). Every frame is opened by a listener, none plain."""
    process = subprocess.Popen([sys.executable, str(STANDIN), "--heartbeat-ms", "500", "--dave", "--dave-required"],
                               stdout=subprocess.PIPE)
    try:
        ready = json.loads(process.stdout.readline())
        control(ready, f"/channel?server_id={GUILD}&channel_id={CHANNEL}")
        run_voice_client(ready, tone_frames(440, 250),
                         midway=lambda: control(ready, f"/listener?server_id={GUILD}&user_id=900000000000000002"))
        heard = report(ready)
        assert heard["unopened"] == 0
        call = heard["calls"][str(GUILD)]
        commits = [event for event in call["events"] if event["kind"] == "commit"]
        assert [c["committer"] for c in commits] == [None, USER], call["events"]
        assert commits[0]["added"] == [USER] and commits[1]["added"] == [900000000000000002], commits
        assert call["epoch"] == 2 and len(call["in_group"]) == 3, call
        assert sum(1 for event in call["events"] if event["kind"] == "executed") == 2, call["events"]
        (stream,) = heard["streams"].values()
        assert stream["dave"]["plain"] == 0 and stream["dave"]["failed"] == 0, stream
        assert stream["dave"]["dave"] >= 245, stream
        assert stream["sequence_breaks"] == 0, stream
        assert abs(stream["dominant_hz"] - 440) < 10, stream
    finally:
        process.kill()
        process.wait()
