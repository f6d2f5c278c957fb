#!/usr/bin/env python3
"""Clients that hold an HTTP server's connections without doing their part, for Tonearm's tests:

  slow_http.py HOST PORT SLOW IDLE SECONDS

opens SLOW connections that send a request head one byte a second (slowloris), and IDLE
connections that make one complete keep-alive request (GET /health), read the answer and then
send nothing. After SECONDS it prints one JSON line: how many of each the server had closed, and
after how many seconds (from when each was opened), e.g.
{"slow": 300, "slow_closed": 300, "slow_closed_after": [10.0, ...], "idle": 300, "idle_closed": ...}.
Standard library only; one thread, non-blocking sockets."""
import json, selectors, socket, sys, time

host, port, slow_count, idle_count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
head = f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: slowloris\r\nAccept: */*\r\n".encode()
selector = selectors.DefaultSelector()
clients = []  # dicts: kind, sock, opened, sent, closed_after


def open_client(kind):
    sock = socket.create_connection((host, port))
    sock.setblocking(False)
    client = {"kind": kind, "sock": sock, "opened": time.monotonic(), "sent": 0, "closed_after": None, "answered": False}
    if kind == "idle":
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
    selector.register(sock, selectors.EVENT_READ, client)
    clients.append(client)


for _ in range(slow_count):
    open_client("slow")
for _ in range(idle_count):
    open_client("idle")

start = time.monotonic()
next_byte = start
while time.monotonic() - start < seconds:
    now = time.monotonic()
    if now >= next_byte:
        # One more byte of the head on every slow connection still open (never the blank line).
        for client in clients:
            if client["kind"] == "slow" and client["closed_after"] is None:
                try:
                    client["sock"].send(head[client["sent"] % len(head):client["sent"] % len(head) + 1])
                    client["sent"] += 1
                except OSError:
                    client["closed_after"] = now - client["opened"]
        next_byte += 1
    for key, _ in selector.select(timeout=max(0.0, min(next_byte, start + seconds) - time.monotonic())):
        client = key.data
        try:
            data = client["sock"].recv(65536)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            data = b""
        if data:
            client["answered"] = True
            continue
        client["closed_after"] = time.monotonic() - client["opened"]
        selector.unregister(client["sock"])

report = {}
for kind in ("slow", "idle"):
    mine = [c for c in clients if c["kind"] == kind]
    closed = [round(c["closed_after"], 2) for c in mine if c["closed_after"] is not None]
    report[kind] = len(mine)
    report[f"{kind}_closed"] = len(closed)
    report[f"{kind}_closed_after"] = sorted(closed)
report["idle_answered"] = sum(1 for c in clients if c["kind"] == "idle" and c["answered"])
print(json.dumps(report))
