#!/usr/bin/env python3
"""A DNS server for Tonearm's rebinding test, run inside a network namespace whose resolv.conf
points at it: each name under .test is answered with --first (an address the engine allows) the
first time it is asked for, and with --then (a private one) every time after, with a TTL of 0.
AAAA questions get no answer, anything else NXDOMAIN. GET-free: it prints "ready" once bound and
logs each answer on stderr."""
import argparse
import signal
import socket
import struct
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--bind", default="127.0.0.53")
parser.add_argument("--first", required=True)
parser.add_argument("--then", required=True)
args = parser.parse_args()
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

asked = {}
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((args.bind, 53))
print("ready", flush=True)

while True:
    query, client = sock.recvfrom(512)
    if len(query) < 12:
        continue
    ident, _flags, qdcount = struct.unpack(">HHH", query[:6])
    # The question: labels up to the zero byte, then type and class.
    end = 12
    labels = []
    while end < len(query) and query[end] != 0:
        length = query[end]
        labels.append(query[end + 1:end + 1 + length].decode("ascii", "replace").lower())
        end += 1 + length
    question = query[12:end + 5]
    qtype = struct.unpack(">H", query[end + 1:end + 3])[0] if end + 3 <= len(query) else 0
    name = ".".join(labels)
    answers = b""
    rcode = 0
    if not name.endswith(".test"):
        rcode = 3
    elif qtype == 1:
        count = asked.get(name, 0)
        asked[name] = count + 1
        address = args.first if count == 0 else args.then
        print(f"{name} -> {address}", file=sys.stderr, flush=True)
        answers = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + socket.inet_aton(address)
    header = struct.pack(">HHHHHH", ident, 0x8180 | rcode, 1, 1 if answers else 0, 0, 0)
    sock.sendto(header + question + answers, client)
