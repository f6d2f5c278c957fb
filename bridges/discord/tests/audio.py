"""What a listener would hear, from the packets discord.py's player handed to the voice client."""

from __future__ import annotations

import math
from array import array

import discord.opus

from tonearm_discord.jitter import SILENCE


def load_opus() -> None:
    if not discord.opus.is_loaded():
        discord.opus.load_opus("libopus.so.0")


def decode(packets: list[bytes]) -> array:
    """The left channel of the packets, 48 kHz, as floats in -1…1 (silence frames included)."""
    load_opus()
    decoder = discord.opus.Decoder()
    left = array("f")
    for packet in packets:
        pcm = array("h")
        pcm.frombytes(decoder.decode(packet, fec=False))
        left.extend(sample / 32768 for sample in pcm[0::2])
    return left


def level(samples: array) -> float:
    """RMS level."""
    return math.sqrt(sum(s * s for s in samples) / len(samples)) if samples else 0.0


def dominant_frequency(samples: array, rate: int = 48_000) -> float:
    """The frequency of a pure tone, from its zero crossings (enough for the test tones)."""
    crossings = sum(1 for a, b in zip(samples, samples[1:]) if (a < 0) != (b < 0))
    return crossings / 2 / (len(samples) / rate) if samples else 0.0


def is_silence(packet: bytes) -> bool:
    return packet == SILENCE
