"""The last step before the network: discord.py's real ``VoiceClient`` turning the bridge's
packets into RTP datagrams, with only its connection (the UDP socket and the voice gateway)
replaced by a recorder. The datagrams are decrypted with the call's key the way a Discord
listener's client would (AEAD XChaCha20-Poly1305, the header as associated data) and must carry
the Router's Opus packets unchanged, on a well-formed RTP stream.

What this cannot reach: the voice gateway's handshake and DAVE's end-to-end layer. With no MLS
group (no real Discord), discord.py sends the transport-encrypted packet without the DAVE frame
(``dave_session`` is None here, as it is before a group exists); docs/discord.md lists the
manual check that covers the rest."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from types import SimpleNamespace

import discord
import nacl.secret
import nacl.utils
from discord.voice_client import VoiceClient

from audio import decode, dominant_frequency, is_silence
from tonearm_discord.guild_player import GuildPlayer

GUILD = "223344556677889900"
KEY = nacl.utils.random(32)
SSRC = 0x1092


class RecordedConnection:
    """What ``VoiceClient`` asks of its ``VoiceConnectionState`` while sending, recording each
    UDP datagram instead of sending it."""

    def __init__(self) -> None:
        self.secret_key = list(KEY)
        self.ssrc = SSRC
        self.mode = "aead_xchacha20_poly1305_rtpsize"
        self.dave_session = None
        self.can_encrypt = False
        self.timeout = 5.0
        self.ws = SimpleNamespace(speak=self._speak)
        self.speaking: list[int] = []
        self.datagrams: list[bytes] = []
        self._lock = threading.Lock()

    async def _speak(self, state) -> None:
        self.speaking.append(int(state))

    def is_connected(self) -> bool:
        return True

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def send_packet(self, packet: bytes) -> None:
        with self._lock:
            self.datagrams.append(bytes(packet))

    def recorded(self) -> list[bytes]:
        with self._lock:
            return list(self.datagrams)

    async def disconnect(self, *, force: bool, wait: bool) -> None:
        pass


class RecordedVoiceClient(VoiceClient):
    def create_connection_state(self) -> RecordedConnection:  # type: ignore[override]
        return RecordedConnection()


def open_datagram(datagram: bytes) -> tuple[int, int, int, bytes]:
    """(sequence, timestamp, ssrc, Opus packet) of one datagram, as a listener decrypts it."""
    header, sealed, nonce = datagram[:12], datagram[12:-4], datagram[-4:]
    assert header[0] == 0x80 and header[1] == 0x78, f"RTP version 2, payload type 120: {header[:2].hex()}"
    sequence, timestamp, ssrc = struct.unpack(">HII", header[2:12])
    opus = nacl.secret.Aead(KEY).decrypt(sealed, bytes(header), nonce + bytes(20))
    return sequence, timestamp, ssrc, opus


def test_discords_voice_client_sends_the_routers_opus_unchanged(cluster):
    async def scenario():
        client = discord.Client(intents=discord.Intents.none())
        client.loop = asyncio.get_running_loop()  # set by login(), which needs Discord
        voice = RecordedVoiceClient(client, SimpleNamespace(id=1, guild=SimpleNamespace(id=int(GUILD))))
        player = GuildPlayer(GUILD, cluster.url, cluster.token)
        received: list[bytes] = []
        push = player.buffer.push

        def recording_push(packet: bytes) -> None:
            received.append(bytes(packet))
            push(packet)

        player.buffer.push = recording_push  # type: ignore[method-assign]
        player.start()
        try:
            await player.link.wait_connected(10)
            await player.attach(voice)
            await player.link.command("play", url="tone-880.mp3")
            deadline = time.monotonic() + 10
            while len(voice._connection.recorded()) < 150 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)
            return received, voice._connection.recorded(), list(voice._connection.speaking)
        finally:
            await player.close()

    received, datagrams, speaking = asyncio.run(scenario())
    opened = [open_datagram(d) for d in datagrams]
    assert len(opened) >= 150, f"{len(opened)} datagrams"
    sequences = [s for s, _, _, _ in opened]
    timestamps = [t for _, t, _, _ in opened]
    assert all(ssrc == SSRC for _, _, ssrc, _ in opened)
    assert all((b - a) % 65536 == 1 for a, b in zip(sequences, sequences[1:])), "sequence numbers step by one"
    assert all((b - a) % 2**32 == 960 for a, b in zip(timestamps, timestamps[1:])), "timestamps step by 960 (20 ms at 48 kHz)"
    sent = [opus for _, _, _, opus in opened if not is_silence(opus)]
    assert len(sent) >= 100, f"{len(sent)} audible packets"
    # Byte for byte what the Router sent, in its order: nothing decoded, re-encoded or reordered.
    assert sent[0] in received, "the first packet sent is not one the Router sent"
    start = received.index(sent[0])
    assert sent == received[start : start + len(sent)], "the packets sent are not the Router's, in its order"
    assert abs(dominant_frequency(decode(sent[10:])) - 880) < 15
    assert speaking and speaking[-1] == 1, f"speaking while the tone played: {speaking}"
