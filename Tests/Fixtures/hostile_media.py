#!/usr/bin/env python3
"""Media files a stranger could hand Tonearm to break it, for the isolation tests (standard library
only; ffmpeg encodes the honest part).

  hostile_media.py oversized-packet OUT.opus   a 4 s 330 Hz Ogg Opus tone with one 93 KB packet
                                               (larger than a wire frame) after its first second
  hostile_media.py huge-title OUT.opus         the same tone whose OpusTags title is 100 KB
  hostile_media.py garbage-packets OUT.opus    the tone followed by 2 s of packets that are not Opus
  hostile_media.py huge-timestamps OUT.opus    the tone with granule positions near 2^62
  hostile_media.py many-channels OUT.wav       16 channels of a tone (WAV)
"""
import struct, subprocess, sys, tempfile, os


def crc32(data):
    """The Ogg page checksum (polynomial 0x04c11db7, no reflection, initial value 0)."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def read_packets(path):
    """The packets of the first logical stream of an Ogg file."""
    data = open(path, "rb").read()
    packets, current, at = [], b"", 0
    while at < len(data):
        assert data[at:at + 4] == b"OggS", "not an Ogg page"
        count = data[at + 26]
        lacing = data[at + 27:at + 27 + count]
        body = at + 27 + count
        for size in lacing:
            current += data[body:body + size]
            body += size
            if size < 255:
                packets.append(current)
                current = b""
        at = body
    return packets


def write_ogg(path, packets, serial=0x70AE, first_granule=0):
    """One Ogg page per packet (a large packet spans as many pages as its lacing needs)."""
    out, sequence, granule = bytearray(), 0, first_granule
    for index, packet in enumerate(packets):
        if index < 2:
            page_granule = 0
        else:
            granule += 960
            page_granule = granule
        segments = [255] * (len(packet) // 255) + [len(packet) % 255]
        chunks = [segments[i:i + 255] for i in range(0, len(segments), 255)]
        offset = 0
        for number, lacing in enumerate(chunks):
            size = sum(lacing)
            flags = (0x02 if index == 0 else 0) | (0x01 if number > 0 else 0)
            if index == len(packets) - 1 and number == len(chunks) - 1:
                flags |= 0x04
            last = number == len(chunks) - 1
            header = struct.pack("<4sBBqIII", b"OggS", 0, flags, page_granule if last else -1, serial, sequence, 0)
            page = bytearray(header + bytes([len(lacing)]) + bytes(lacing) + packet[offset:offset + size])
            struct.pack_into("<I", page, 22, crc32(page))
            out += page
            offset += size
            sequence += 1
    open(path, "wb").write(out)


def tone(seconds=4, hz=330):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "tone.opus")
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                        f"aevalsrc=0.5*sin(2*PI*{hz}*t)|0.5*sin(2*PI*{hz}*t):s=48000:d={seconds}",
                        "-c:a", "libopus", "-b:a", "96k", "-frame_duration", "20", path], check=True)
        return read_packets(path)


def tags(title):
    vendor = b"hostile"
    comment = b"title=" + title.encode()
    return b"OpusTags" + struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", 1) + struct.pack("<I", len(comment)) + comment


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "many-channels":
        wave = "|".join(["0.3*sin(2*PI*330*t)"] * 16)
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"aevalsrc={wave}:s=48000:d=4", out], check=True)
        return
    packets = tone()
    head, audio = packets[0], packets[2:]
    if kind == "oversized-packet":
        # TOC 0xF8: CELT fullband, 20 ms, one frame (code 0) — and 93 KB where 1,275 bytes is the most.
        huge = bytes([0xF8]) + bytes(range(256)) * 372
        write_ogg(out, [head, tags("oversized")] + audio[:50] + [huge] + audio[50:])
    elif kind == "huge-title":
        write_ogg(out, [head, tags("\u00e9\u0001" * 34_000)] + audio)
    elif kind == "garbage-packets":
        # Code 0 packets whose one frame is longer than any valid frame: libopus refuses each.
        garbage = [bytes([0xF8]) + bytes([n % 251]) * 1_400 for n in range(100)]
        write_ogg(out, [head, tags("garbage")] + audio[:50] + garbage)
    elif kind == "huge-timestamps":
        # Granules just under 2^62 (FFmpeg's Ogg demuxer itself refuses larger ones), with the largest
        # pre-skip: timestamps of about 3,000 years.
        head = head[:10] + struct.pack("<H", 65535) + head[12:]
        write_ogg(out, [head, tags("far future")] + audio, first_granule=(1 << 62) - (1 << 40))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
