#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (Tests/Fuzz): seeds.py OUT_DIR writes OUT_DIR/<Target>/*.

Wire and events: real engine output shapes (audio packets, event lines, both mixed). Commands:
every command a client can send, with good and bad arguments. Media: a quarter second of a tone
in every container and codec Tonearm plays, made by the ffmpeg CLI (a seed maker, not the audio
path), plus the hostile files of the isolation tests."""
import json, os, struct, subprocess, sys

out = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def packet(session, payload):
    return struct.pack(">I", 24 + len(payload)) + session.ljust(24).encode() + payload


events = [
    {"type": "ready", "session_id": "guild-1", "play_id": 3, "title": "A tone", "duration_ms": 120000, "passthrough": True},
    {"type": "finished", "session_id": "guild-1", "play_id": 3, "reason": "finished"},
    {"type": "error", "session_id": "b 7", "play_id": 1, "code": "source_open_failed", "message": "cannot open \u00e9"},
    {"type": "progress", "session_id": "x", "play_id": 9, "position_ms": 4200},
    {"type": "volume", "session_id": "x", "volume": 250},
    {"type": "seeked", "session_id": "x", "position_ms": 1099511627776},
    {"type": "paused", "session_id": "123456789012345678901234"},
]
for i, event in enumerate(events):
    line = json.dumps(event, separators=(",", ":"))
    write("FuzzEvents", f"event-{i}", line)
    write("FuzzWire", f"event-{i}", b"\x01" + line.encode() + b"\n")
opus = bytes([0xFC, 0xFF, 0xFE]) + bytes(range(60))
write("FuzzWire", "audio", b"\x07" + packet("guild-1", opus) + packet("b 7", opus[:10]))
write("FuzzWire", "mixed", b"\x10" + packet("a", opus) + (json.dumps(events[0]) + "\n").encode() + packet("a", opus))
write("FuzzWire", "max-frame", b"\xff" + packet("big", bytes(65535 - 24)))

commands = [
    {"op": "play", "url": "tone-440.mp3", "id": 1}, {"op": "queue", "url": "https://example.com/a.ogg", "id": "q"},
    {"op": "remove", "index": 0}, {"op": "jump", "index": 2}, {"op": "next"}, {"op": "previous"},
    {"op": "pause"}, {"op": "resume"}, {"op": "stop"}, {"op": "seek", "position_ms": 90000},
    {"op": "volume", "volume": 150}, {"op": "normalize", "enabled": False}, {"op": "loop", "mode": "queue"},
    {"op": "shuffle"}, {"op": "clear"},
    {"op": "state", "id": 9}, {"op": "seek", "position_ms": -1}, {"op": "jump", "index": 9223372036854775807},
    {"op": "volume", "volume": "loud"}, {"op": "nope"},
]
write("FuzzCommands", "session", "\n".join(json.dumps(c) for c in commands))
for i, c in enumerate(commands):
    write("FuzzCommands", f"command-{i}", json.dumps(c))
write("FuzzCommands", "ids", "guild%41\nx%2541\nv1.abc.def\n\n{}")

tone = "sine=frequency=440:sample_rate={rate}:duration=0.25"
media = [
    ("tone.mp3", ["-ar", "44100", "-c:a", "libmp3lame", "-b:a", "32k"]),
    ("tone.opus", ["-ar", "48000", "-c:a", "libopus", "-b:a", "24k"]),
    ("tone.webm", ["-ar", "48000", "-ac", "2", "-c:a", "libopus", "-b:a", "24k"]),
    ("tone.ogg", ["-ar", "22050", "-c:a", "libvorbis", "-q:a", "0"]),
    ("tone.m4a", ["-ar", "44100", "-c:a", "aac", "-b:a", "32k"]),
    ("tone.flac", ["-ar", "8000", "-c:a", "flac"]),
    ("tone.wav", ["-ar", "8000", "-c:a", "pcm_s16le"]),
    ("tone.aiff", ["-ar", "8000", "-c:a", "pcm_s16be"]),
    ("tone.mka", ["-ar", "32000", "-c:a", "pcm_f32le"]),
    ("tone.mp4", ["-ar", "48000", "-ac", "6", "-c:a", "aac", "-b:a", "48k"]),
    ("tone.ac3", ["-ar", "48000", "-c:a", "ac3", "-b:a", "64k"]),
    ("tone.mp2", ["-ar", "32000", "-c:a", "mp2", "-b:a", "32k"]),
    ("tone.wma", ["-ar", "22050", "-c:a", "wmav2", "-b:a", "32k"]),
    ("tone.aac", ["-ar", "16000", "-c:a", "aac", "-b:a", "16k"]),
    ("tone.caf", ["-ar", "11025", "-c:a", "pcm_s16le"]),
    # Loudness tags, read as untrusted text (an R128 gain of Int.min once trapped in abs()).
    ("tagged.opus", ["-c:a", "libopus", "-b:a", "32k", "-metadata", "R128_TRACK_GAIN=-9223372036854775808"]),
    ("tagged.flac", ["-c:a", "flac", "-metadata", "REPLAYGAIN_TRACK_GAIN=-6.50 dB"]),
]
for name, args in media:
    os.makedirs(os.path.join(out, "FuzzMedia"), exist_ok=True)
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", tone.format(rate=48000)]
                   + args + ["-metadata", "title=seed", os.path.join(out, "FuzzMedia", name)], check=True)
hostile = os.path.join(here, "..", "Fixtures", "hostile_media.py")
for kind, name in [("huge-title", "huge-title.opus"), ("garbage-packets", "garbage.opus"), ("huge-timestamps", "timestamps.opus")]:
    subprocess.run([sys.executable, hostile, kind, os.path.join(out, "FuzzMedia", name)], check=True)
