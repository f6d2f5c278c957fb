#!/usr/bin/env python3
"""A deliberately badly behaved WebSocket client for the Router's tests (standard library only).

  ws_probe.py URL stall SECONDS   handshake, then read nothing for SECONDS (tiny receive buffer);
                                  then drain what is left and report how the connection ended
  ws_probe.py URL nopong SECONDS  read everything but never answer a ping; report the close

Prints one JSON line: {"upgraded", "close_code", "close_reason", "ended", "seconds", "bytes"}.
"""
import base64, json, os, socket, struct, sys, time
from urllib.parse import urlparse


def connect(url, rcvbuf=None):
    parts = urlparse(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((parts.hostname, parts.port))
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
    return sock, head.startswith(b"HTTP/1.1 101")


def frames(sock, deadline):
    """Yields (opcode, payload) until EOF, an error or the deadline."""
    buffer = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
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


def main():
    url, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
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
