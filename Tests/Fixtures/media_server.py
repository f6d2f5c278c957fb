#!/usr/bin/env python3
"""A local HTTP media server for Tonearm's tests: serves a directory with Range support, and can
misbehave on purpose, once each: stall for a while at a byte offset (or in every response that
is not a Range request), or drop the connection at another. It can also pace its output to a multiple of real time, dribble (send a first stretch
fast, then the rest one byte at a time, however it is asked for), listen on another loopback address (--bind 127.0.0.2) and
redirect paths elsewhere. Prints the port it bound; GET /requests lists what it was asked for,
GET /open how many of its responses are being sent right now."""
import argparse
import http.server
import mimetypes
import os
import signal
import socketserver
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--root", required=True)
parser.add_argument("--stall-at", type=int, default=-1, help="byte offset at which to stall once")
parser.add_argument("--stall-seconds", type=float, default=2.0)
parser.add_argument("--stall-every-whole", action="store_true",
                    help="stall at --stall-at in every response without a Range header (a link's probe and its play), "
                         "not only once; a reader that reopens with a Range gets the rest at once")
parser.add_argument("--drop-at", type=int, default=-1, help="byte offset at which to close the connection once")
parser.add_argument("--rate", type=int, default=0, help="bytes per second to send (0: unlimited)")
parser.add_argument("--dribble-after", type=int, default=-1,
                    help="send every byte from this offset of the file on (whatever Range asked) one per --dribble-interval")
parser.add_argument("--dribble-interval", type=float, default=0.05)
parser.add_argument("--port", type=int, default=0, help="the port to listen on (0: any free one)")
parser.add_argument("--bind", default="127.0.0.1", help="the address to listen on (127.0.0.2 is loopback too)")
parser.add_argument("--redirect", action="append", default=[], metavar="PATH=URL",
                    help="answer GET PATH with 302 to URL (repeatable)")
args = parser.parse_args()
# A parent may have started us with every signal blocked (threads of Swift's runtime block them).
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

state = {"stalled": False, "dropped": False, "requests": [], "open": 0}
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = os.path.join(args.root, self.path.split("?")[0].lstrip("/"))
        for rule in args.redirect:
            source, _, target = rule.partition("=")
            if self.path.split("?")[0] == source:
                with lock:
                    state["requests"].append(f"{self.path} redirected")
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        if self.path.startswith("/requests") or self.path.startswith("/open"):
            with lock:
                body = ("\n".join(state["requests"]) if self.path.startswith("/requests") else str(state["open"])).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if not os.path.isfile(path):
            self.send_error(404)
            return
        size = os.path.getsize(path)
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        with lock:
            state["requests"].append(f"{self.path} {rng or '-'}")
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            start = int(first) if first else 0
            end = int(last) if last else size - 1
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
        self.send_header("Content-Type", ctype)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        with lock:
            state["open"] += 1
        try:
            self.send_file(path, start, end, whole=not rng)
        finally:
            with lock:
                state["open"] -= 1

    def send_file(self, path, start, end, whole=True):
        with open(path, "rb") as f:
            f.seek(start)
            offset = start
            began = time.monotonic()
            sent = 0
            while offset <= end:
                chunk = f.read(min(4096, end - offset + 1))
                if not chunk:
                    break
                with lock:
                    again = args.stall_every_whole and whole
                    if args.stall_at >= 0 and (again or not state["stalled"]) and offset <= args.stall_at < offset + len(chunk):
                        state["stalled"] = True
                        stall = True
                    else:
                        stall = False
                    if args.drop_at >= 0 and not state["dropped"] and offset <= args.drop_at < offset + len(chunk):
                        state["dropped"] = True
                        drop = True
                    else:
                        drop = False
                if drop:
                    self.wfile.write(chunk[: args.drop_at - offset])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if stall:
                    time.sleep(args.stall_seconds)
                if args.dribble_after >= 0 and offset + len(chunk) > args.dribble_after:
                    fast = max(0, args.dribble_after - offset)
                    try:
                        self.wfile.write(chunk[:fast])
                        self.wfile.flush()
                        for byte in chunk[fast:]:
                            time.sleep(args.dribble_interval)
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        return
                    offset += len(chunk)
                    sent += len(chunk)
                    continue
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                offset += len(chunk)
                sent += len(chunk)
                if args.rate > 0:
                    ahead = sent / args.rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


server = Server((args.bind, args.port), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
