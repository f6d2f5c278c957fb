"""The reference bot's second mode (``TONEARM_VOICE=tonearm``): the bot forwards the two voice
events of Discord's main gateway and Tonearm sends the guild's audio to the voice server itself.
Played through the stand-in voice server (Tests/Fixtures/voice_server.py), which requires DAVE as
Discord does, with the real engine and Router and tonearm-dave beside the Router: the stand-in
hears the guild's tone, every frame opened with DAVE, and hears it again after the Router
restarted (the bot's link sends the credentials on every connection; the call's group takes the
new connection in). discord.py is real; only the main gateway is replaced by the test, which hands
the bot's ``TonearmVoice`` the events Discord would send."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import discord

from conftest import Cluster
from tonearm_discord.bot import TonearmBot
from tonearm_discord.config import Config
from tonearm_discord.guild_player import GuildPlayer
from tonearm_discord.tonearm_voice import TonearmVoice, wait_forwarded

REPO = Path(__file__).resolve().parent.parent.parent.parent
STANDIN = REPO / "Tests" / "Fixtures" / "voice_server.py"
DAVE = REPO / "bridges" / "dave" / "tonearm_dave.py"
GUILD, CHANNEL, USER = 41771983423143937, 127121515262115840, 104694319306248192


def report(control_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{control_port}/report", timeout=5) as response:
        return json.load(response)


class Gateway:
    """The main gateway's part: what the bot asks (op 4), and the events it answers with."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.asked: list = []
        self.voice: TonearmVoice | None = None

    async def change_voice_state(self, *, channel, self_deaf: bool = False, self_mute: bool = False) -> None:
        self.asked.append(getattr(channel, "id", None))
        voice = self.voice
        if voice is None:
            return
        await asyncio.sleep(0.05)
        await voice.on_voice_state_update({"channel_id": channel and str(channel.id), "session_id": "main-gateway-session"})
        if channel is not None:
            await voice.on_voice_server_update({"token": "voice-token", "guild_id": str(GUILD), "endpoint": self.endpoint})


def test_the_bot_forwards_its_voice_events_and_tonearm_is_heard(tmp_path):
    standin = subprocess.Popen([sys.executable, str(STANDIN), "--dave", "--dave-required"], stdout=subprocess.PIPE)
    socket_path = os.path.join(tempfile.mkdtemp(prefix="tonearm-dave-"), "dave.sock")
    dave = subprocess.Popen([sys.executable, str(DAVE), "--socket", socket_path], stdout=subprocess.PIPE)
    try:
        ready = json.loads(standin.stdout.readline())
        dave.stdout.readline()
        request = urllib.request.Request(
            f"http://127.0.0.1:{ready['control_port']}/channel?server_id={GUILD}&channel_id={CHANNEL}", method="POST")
        urllib.request.urlopen(request, timeout=5).read()
        cluster = Cluster(tmp_path, {"TONEARM_VOICE_CA_FILE": ready["ca"], "TONEARM_DAVE_SOCKET": socket_path})
        try:
            assert TonearmBot(Config(discord_token="a", bot_token="b", voice="tonearm")).voice_client_class is TonearmVoice

            async def scenario() -> None:
                client = discord.Client(intents=discord.Intents.none())
                client._connection.user = SimpleNamespace(id=USER)  # set by the main gateway's READY
                gateway = Gateway(f"localhost:{ready['ws_port']}")
                guild = SimpleNamespace(id=GUILD, change_voice_state=gateway.change_voice_state)
                channel = SimpleNamespace(id=CHANNEL, guild=guild, _get_voice_client_key=lambda: (GUILD, "guild_id"))
                voice = TonearmVoice(client, channel)
                gateway.voice = voice
                # As the bot joins: the channel first, then the guild's link, then the credentials.
                await voice.connect(timeout=10, reconnect=True, self_deaf=True)
                player = GuildPlayer(GUILD, cluster.url, cluster.token)
                player.start()
                try:
                    await player.link.wait_connected(10)
                    await player.attach(voice)
                    await voice.attach(player.link)
                    assert await wait_forwarded(voice, 5), "the credentials never went to Tonearm"
                    await player.link.command("play", url="tone-440.mp3")
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        streams = report(ready["control_port"])["streams"]
                        if streams and next(iter(streams.values()))["packets"] >= 150:
                            break
                        await asyncio.sleep(0.2)
                    # The Router restarts (as a guild moves to another pair): the bot's link
                    # connects again, sends the credentials again, and the voice comes back.
                    first = next(iter(report(ready["control_port"])["streams"]))
                    cluster.kill_router()
                    cluster.start_router()
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline:
                        streams = report(ready["control_port"])["streams"]
                        again = [s for ssrc, s in streams.items() if ssrc != first]
                        if again and again[0]["packets"] >= 100:
                            break
                        await asyncio.sleep(0.2)
                    await voice.disconnect(force=True)
                    assert gateway.asked == [CHANNEL, None]
                finally:
                    await player.close()

            asyncio.run(scenario())
            heard = report(ready["control_port"])
            identify = next(event for event in heard["events"] if event["kind"] == "identify")
            assert identify["server_id"] == str(GUILD) and identify["user_id"] == str(USER)
            assert identify["session_id"] == "main-gateway-session"
            identifies = [event for event in heard["events"] if event["kind"] == "identify"]
            assert len(identifies) == 2, "one voice connection before the Router restarted, one after"
            before, after = heard["streams"].values()
            assert before["packets"] >= 150 and after["packets"] >= 100, heard["streams"]
            for stream in (before, after):
                assert abs(stream["dominant_hz"] - 440) < 10, stream
                assert stream["sequence_breaks"] == 0, stream
                assert stream["dave"]["plain"] == 0 and stream["dave"]["failed"] == 0, stream
                assert stream["dave"]["dave"] == stream["packets"] - stream["silence_frames"], stream
            deadline = time.monotonic() + 5
            while report(ready["control_port"])["open_sockets"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert report(ready["control_port"])["open_sockets"] == 0, "voice_leave did not end the voice connection"
        finally:
            cluster.stop()
    finally:
        for process in (standin, dave):
            process.kill()
            process.wait()
