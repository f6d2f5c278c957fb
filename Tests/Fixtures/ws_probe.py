#!/usr/bin/env python3
"""A raw WebSocket client for the Router's tests and the deployment smoke test (standard library
only; ffmpeg decodes).

  ws_probe.py URL stall SECONDS   handshake, then read nothing for SECONDS (tiny receive buffer);
                                  then drain what is left and report how the connection ended
  ws_probe.py URL nopong SECONDS  read everything but never answer a ping; report the close
  ws_probe.py URL record SECONDS OUT.ogg
                                  keep the binary (Opus) messages as an Ogg Opus file; print how many
  ws_probe.py URL churn COUNT     open COUNT connections one after another, each closed as soon as
                                  it is upgraded (every other one with a close frame, the rest cut);
                                  print how many were upgraded
  ws_probe.py tone FILE           print the dominant frequency (Hz) of an audio file

wss:// URLs are verified against the system's authorities, or the one in SSL_CERT_FILE.

stall and nopong print one JSON line: {"upgraded", "close_code", "close_reason", "ended", "seconds", "bytes"}.
"""
import base64, json, os, socket, ssl, struct, subprocess, sys, time
from urllib.parse import urlparse


last_head = b""  # the last handshake's answer, for a refusal's message


def connect(url, rcvbuf=None, timeout=None):
    """A WebSocket handshake; `timeout` bounds the connection and the handshake (a host cut off
    answers neither)."""
    parts = urlparse(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect((parts.hostname, parts.port or (443 if parts.scheme == "wss" else 80)))
    if parts.scheme == "wss":
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
    key = base64.b64encode(os.urandom(16)).decode()
    path = parts.path + ("?" + parts.query if parts.query else "")
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    sock.settimeout(None)
    global last_head
    last_head = head
    return sock, head.startswith(b"HTTP/1.1 101")


def upgrade_refusal(sock):
    """What came instead of 101 Switching Protocols: the status line and the body's last line
    (a balancer's 502, a Router's JSON error), or that nothing came."""
    sock.settimeout(1)
    rest = last_head.split(b"\r\n\r\n", 1)[-1] if b"\r\n\r\n" in last_head else b""
    status = last_head.split(b"\r\n", 1)[0].decode(errors="replace")
    try:
        while len(rest) < 400:
            chunk = sock.recv(400)
            if not chunk:
                break
            rest += chunk
    except OSError:
        pass
    body = [line for line in rest.decode(errors="replace").splitlines() if line.strip()]
    return " / ".join([status] + body[-1:]) if status else "the connection ended before any answer"


def frames(sock, deadline, silence=None):
    """Yields (opcode, payload) until EOF, an error or the deadline; with `silence`, yields
    ("silent", b"") and ends when nothing at all arrives for that long."""
    buffer = b""
    while time.monotonic() < deadline:
        wait = max(0.05, deadline - time.monotonic())
        sock.settimeout(min(wait, silence) if silence else wait)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            if silence and time.monotonic() < deadline:
                yield "silent", b""
            return
        except OSError:
            yield None, b""
            return
        if not chunk:
            yield None, b""
            return
        buffer += chunk
        while len(buffer) >= 2:
            opcode, length, offset = buffer[0] & 0x0F, buffer[1] & 0x7F, 2
            if length == 126:
                if len(buffer) < 4: break
                length, offset = struct.unpack(">H", buffer[2:4])[0], 4
            elif length == 127:
                if len(buffer) < 10: break
                length, offset = struct.unpack(">Q", buffer[2:10])[0], 10
            if len(buffer) < offset + length:
                break
            yield opcode, buffer[offset:offset + length]
            buffer = buffer[offset + length:]


CRC_TABLE = []
for i in range(256):
    r = i << 24
    for _ in range(8):
        r = ((r << 1) ^ 0x04C11DB7) if r & 0x80000000 else (r << 1)
    CRC_TABLE.append(r & 0xFFFFFFFF)


def ogg_page(packet, sequence, granule, flags):
    segments = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = struct.pack("<4sBBqIII", b"OggS", 0, flags, granule, 1, sequence, 0) + bytes([len(segments)] + segments)
    page = bytearray(header + packet)
    crc = 0
    for byte in page:
        crc = ((crc << 8) ^ CRC_TABLE[((crc >> 24) ^ byte) & 0xFF]) & 0xFFFFFFFF
    page[22:26] = struct.pack("<I", crc)
    return bytes(page)


def record(url, seconds, out):
    sock, upgraded = connect(url)
    if not upgraded:
        sys.exit("no WebSocket upgrade: " + upgrade_refusal(sock))
    packets, seen = [], []
    for opcode, payload in frames(sock, time.monotonic() + seconds):
        if opcode == 2:
            packets.append(payload)
        elif opcode == 8:
            code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else "-"
            seen.append(f"close {code} {payload[2:].decode(errors='replace')}")
        elif opcode == 1:
            seen.append(payload[:200].decode(errors="replace"))
        elif opcode is None:
            seen.append("the connection ended")
    if len(packets) < seconds * 40:  # under 80 % of the frames: say what came instead
        print(f"{len(packets)} frames; last seen: " + " | ".join(seen[-3:]), file=sys.stderr)
    with open(out, "wb") as f:
        f.write(ogg_page(b"OpusHead" + struct.pack("<BBHIhB", 1, 2, 312, 48000, 0, 0), 0, 0, 2))
        f.write(ogg_page(b"OpusTags" + struct.pack("<I", 5) + b"probe" + struct.pack("<I", 0), 1, 0, 0))
        for i, packet in enumerate(packets):
            f.write(ogg_page(packet, i + 2, 960 * (i + 1), 4 if i == len(packets) - 1 else 0))
    print(len(packets))


def churn(url, count):
    upgraded = 0
    for n in range(count):
        sock, ok = connect(url)
        upgraded += ok
        if n % 2:
            sock.sendall(bytes([0x88, 0x82, 0, 0, 0, 0, 0x03, 0xE8]))  # close 1000, mask of zeros
        sock.close()
    print(upgraded)


def tone(path):
    pcm = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", path, "-ac", "1", "-ar", "48000",
                          "-f", "s16le", "-"], check=True, capture_output=True).stdout
    samples = struct.unpack(f"<{len(pcm) // 2}h", pcm)[24000:]  # skip the first half second
    if len(samples) < 24000:
        print(0)
        return
    crossings = sum(1 for a, b in zip(samples, samples[1:]) if (a < 0) != (b < 0))
    print(round(crossings / 2 / (len(samples) / 48000)))


def main():
    if sys.argv[1] == "tone":
        return tone(sys.argv[2])
    url, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if mode == "record":
        return record(url, seconds, sys.argv[4])
    if mode == "churn":
        return churn(url, int(seconds))
    started = time.monotonic()
    sock, upgraded = connect(url, rcvbuf=4096 if mode == "stall" else None)
    report = {"upgraded": upgraded, "close_code": None, "close_reason": None, "ended": False, "bytes": 0}
    if mode == "stall":
        time.sleep(seconds)
        deadline = time.monotonic() + 10
    else:
        deadline = started + seconds
    for opcode, payload in frames(sock, deadline):
        if opcode is None:
            report["ended"] = True
            break
        report["bytes"] += len(payload)
        if opcode == 8:
            report["close_code"] = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
            report["close_reason"] = payload[2:].decode(errors="replace")
            report["ended"] = True
            break
    report["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
