#!/usr/bin/env python3
"""The `hls` row of tonearm-load, and the clients it starts (one process each, so their CPU is
theirs and the Router's is measured apart):

  hls_load.py hls    URL COUNT SECONDS   COUNT players of URL (a live HLS playlist), each on its own
                                         keep-alive connection: the playlist every target duration
                                         (2 s), spread evenly, then each segment it names that the
                                         player has not fetched yet, as hls.js and Safari do
  hls_load.py listen URL COUNT SECONDS   COUNT `/listen` listeners of URL (an endless Ogg stream),
                                         read in 200 ms batches

Each prints one JSON object: requests, bytes, errors, and for HLS the segments missed (a player
that fell behind the six-segment window) and request times p50/p99.
"""
import errno, json, os, re, selectors, socket, sys, time, urllib.parse

import station_load
from urllib.parse import urlsplit


def connect(host, port):
    sock = socket.create_connection((host, port))
    sock.setblocking(False)
    return sock


class Player:
    """One HLS player on one connection: a small state machine driven by the selector loop."""

    def __init__(self, host, port, path, query, start):
        self.host, self.port, self.path, self.query = host, port, path, query
        self.base = path.rsplit("/", 1)[0] + "/"
        self.sock = connect(host, port)
        self.next_poll = start
        self.queue = []           # segment paths to fetch
        self.newest = None        # highest segment sequence fetched or queued
        self.buffer = bytearray()
        self.sent_at = None
        self.kind = None
        self.stats = {"playlists": 0, "segments": 0, "bytes": 0, "errors": 0, "missed": 0}
        self.times = []

    def send(self, path, kind, now):
        request = f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nConnection: keep-alive\r\n\r\n"
        self.sock.sendall(request.encode())
        self.sent_at, self.kind = now, kind

    def due(self, now):
        """Starts the next request if none is in flight: a queued segment first, else the playlist."""
        if self.sent_at is not None:
            return
        if self.queue:
            self.send(self.queue.pop(0), "segment", now)
        elif now >= self.next_poll:
            self.next_poll += 2.0
            self.send(self.path + self.query, "playlist", now)

    def readable(self, now):
        try:
            data = self.sock.recv(262144)
        except BlockingIOError:
            return
        if not data:
            raise ConnectionError("closed")
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            match = re.search(r"(?im)^content-length:\s*(\d+)", head)
            length = int(match.group(1)) if match else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4:end + 4 + length])
            del self.buffer[:end + 4 + length]
            status = int(head.split(" ", 2)[1])
            self.finished(status, body, now)

    def finished(self, status, body, now):
        self.times.append(now - self.sent_at)
        self.stats["bytes"] += len(body)
        kind, self.sent_at = self.kind, None
        if status != 200:
            self.stats["errors"] += 1
            return
        if kind == "segment":
            self.stats["segments"] += 1
            return
        self.stats["playlists"] += 1
        names = re.findall(r"(?m)^(\d+)\.m4s(\?\S*)?$", body.decode())
        sequences = [int(n) for n, _ in names]
        if not sequences:
            return
        if self.newest is None:
            # A player starts three segments from the live end.
            start = max(0, len(sequences) - 3)
            chosen = names[start:]
        else:
            if sequences[0] > self.newest + 1:
                self.stats["missed"] += sequences[0] - self.newest - 1
            chosen = [(n, q) for n, q in names if int(n) > self.newest]
        for n, q in chosen:
            self.queue.append(f"{self.base}{n}.m4s{q or ''}")
        self.newest = max(sequences[-1], self.newest or 0)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else 0


def run_hls(url, count, seconds):
    parts = urlsplit(url)
    query = "?" + parts.query if parts.query else ""
    selector = selectors.DefaultSelector()
    begin = time.monotonic()
    players = []
    for i in range(count):
        player = Player(parts.hostname, parts.port, parts.path, query, begin + 2.0 * i / count)
        selector.register(player.sock, selectors.EVENT_READ, player)
        players.append(player)
    end = begin + seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        for player in players:
            player.due(now)
        for key, _ in selector.select(timeout=0.005):
            try:
                key.data.readable(time.monotonic())
            except (ConnectionError, OSError):
                key.data.stats["errors"] += 1
                selector.unregister(key.fileobj)
                players.remove(key.data)
    totals = {k: sum(p.stats[k] for p in players) for k in ["playlists", "segments", "bytes", "errors", "missed"]}
    times = [t for p in players for t in p.times]
    totals.update(players=len(players), seconds=seconds, requests=len(times),
                  p50_ms=percentile(times, 50) * 1000, p99_ms=percentile(times, 99) * 1000)
    return totals


def run_listen(url, count, seconds):
    parts = urlsplit(url)
    path = parts.path + ("?" + parts.query if parts.query else "")
    socks = []
    for _ in range(count):
        sock = connect(parts.hostname, parts.port)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.hostname}\r\n\r\n".encode())
        socks.append(sock)
    received = [0] * count
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.2)
        for i, sock in enumerate(socks):
            while True:
                try:
                    data = sock.recv(262144)
                except BlockingIOError:
                    break
                except OSError as error:
                    if error.errno == errno.EAGAIN:
                        break
                    raise
                if not data:
                    break
                received[i] += len(data)
    return {"listeners": count, "seconds": seconds, "bytes": sum(received),
            "slowest_bytes": min(received), "fastest_bytes": max(received)}


def main():
    mode, url, count, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    result = run_hls(url, count, seconds) if mode == "hls" else run_listen(url, count, seconds)
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- the row


def row(tool, engine_class, router_class, cpu_seconds, listeners, seconds, nginx=None, bot_token=None):
    """One session through one Router: its CPU with the session alone, with `listeners` HLS
    players, and with as many `/listen` listeners, each over `seconds` of steady state, all with
    the session's listen token (or `bot_token`, for a comparison); with
    `nginx` (a path to Debian's nginx binary), the same players through deploy/hls-cache's
    configuration in front: the Router's CPU then, and nginx's."""
    here = os.path.abspath(__file__)
    engine = engine_class(tool)
    router = router_class(tool, engine)
    results = {}
    cache = None
    try:
        station_load.start_station(router)
        time.sleep(3)
        # The listeners carry a listen token, as operators are told to publish (not the bot's).
        status, body = router.command("station", "listen-token")
        if status != 200 or not isinstance(body, dict) or "token" not in body:
            raise SystemExit(f"tonearm-load: listen-token answered {status}: {body}")
        token = urllib.parse.quote(bot_token or body["token"], safe="")

        def measure(label, client=None, warmup=0.0, others=()):
            time.sleep(warmup)
            pids = [router.pid, *others]
            cpu0, t0 = [cpu_seconds(p) for p in pids], time.monotonic()
            time.sleep(seconds)
            cpu1, t1 = [cpu_seconds(p) for p in pids], time.monotonic()
            report = json.loads(client.communicate(timeout=120)[0]) if client else {}
            cores = [(b - a) / (t1 - t0) for a, b in zip(cpu0, cpu1)]
            results[label] = {"core": cores[0], "others": sum(cores[1:]), **report}

        print(f"hls: one session alone, {seconds:g} s", flush=True)
        measure("alone")
        hls_url = f"http://127.0.0.1:{router.port}/hls/station/index.m3u8?token={token}"
        # The first request starts the segmenter (and waits for its first segments).
        urllib_get(hls_url)
        warmup = 6.0
        print(f"hls: {listeners} HLS players, {seconds:g} s", flush=True)
        client = subprocess_run([sys.executable, here, "hls", hls_url, str(listeners), str(seconds + warmup + 1)])
        measure("hls", client, warmup)
        print(f"hls: {listeners} /listen listeners, {seconds:g} s", flush=True)
        listen_url = f"http://127.0.0.1:{router.port}/listen/station.ogg?token={token}"
        client = subprocess_run([sys.executable, here, "listen", listen_url, str(listeners), str(seconds + warmup + 1)])
        measure("listen", client, warmup)
        if nginx:
            cache = Cache(nginx, tool.work, router.port)
            print(f"hls: {listeners} HLS players through nginx, {seconds:g} s", flush=True)
            cached_url = f"http://127.0.0.1:{cache.port}/hls/station/index.m3u8?token={token}"
            client = subprocess_run([sys.executable, here, "hls", cached_url, str(listeners), str(seconds + warmup + 1)])
            time.sleep(warmup)
            measure("cached", client, 0, cache.pids())
    finally:
        if cache:
            cache.stop()
        router.stop()
        engine.stop()
    alone = results["alone"]["core"]
    hls, listen = results["hls"], results["listen"]
    command = f"Benchmarks/Load/tonearm-load --rows hls --hls-listeners {listeners} --hls-seconds {seconds:g}" + (
        " --hls-bot-token" if bot_token else "")
    per = lambda core: (core - alone) / listeners * 1e6  # µs of CPU per listener per second
    tool.row(f"hls: {listeners} HLS players of one session, one Router, with {'the bot' if bot_token else 'a listen'} token",
             f"Router {100 * (hls['core'] - alone):.1f} % of a core beyond the session alone ({100 * alone:.2f} %): "
             f"{per(hls['core']):.0f} µs per listener per second; {hls['requests'] / hls['seconds']:,.0f} requests/s "
             f"({hls['playlists']:,} playlists, {hls['segments']:,} segments), p50 {hls['p50_ms']:.1f} / p99 {hls['p99_ms']:.1f} ms, "
             f"{hls['errors']} errors, {hls['missed']} segments missed",
             "< 10 % of a core (Icecast: 10–15 k listeners per core, 67–100 µs each)", command)
    tool.row(f"hls: {listeners} `/listen` Ogg listeners of the same session, same Router",
             f"Router {100 * (listen['core'] - alone):.1f} % of a core beyond the session alone: "
             f"{per(listen['core']):.0f} µs per listener per second; "
             f"slowest listener {listen['slowest_bytes'] / (seconds + 7) * 8 / 1000:.0f} kbit/s (the stream is 128)",
             "–", command)
    if "cached" in results:
        cached = results["cached"]
        tool.row(f"hls: {listeners} HLS players through nginx (deploy/hls-cache) in front",
                 f"Router {100 * (cached['core'] - alone):.1f} % of a core beyond the session alone, "
                 f"nginx {100 * cached['others']:.1f} % ({cached['others'] / listeners * 1e6:.0f} µs per listener per second); "
                 f"p50 {cached['p50_ms']:.1f} / p99 {cached['p99_ms']:.1f} ms, {cached['errors']} errors, {cached['missed']} missed",
                 "–", command + f" --hls-nginx {nginx}")
    return results


class Cache:
    """deploy/hls-cache/nginx.conf in front of a Router on loopback, in a directory of its own."""

    def __init__(self, nginx, work, router_port):
        import shutil, subprocess, tempfile
        self.dir = tempfile.mkdtemp(dir=work, prefix="nginx-")
        self.port = free_port()
        conf = open(os.path.join(ROOT, "deploy", "hls-cache", "nginx.conf")).read()
        cache = os.path.join(self.dir, "cache")
        os.makedirs(cache)
        temp = "".join(f"    {kind}_temp_path {self.dir}/{kind};\n" for kind in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"])
        # Its workers write the cache in this private directory: as root, they run as root too.
        conf = (conf.replace("user www-data;", "user root;" if os.geteuid() == 0 else "")
                .replace("router:8080", f"127.0.0.1:{router_port}")
                .replace("listen 8090", f"listen 127.0.0.1:{self.port}")
                .replace("/var/cache/tonearm-hls", cache)
                .replace("pid /tmp/nginx.pid", f"pid {self.dir}/nginx.pid")
                .replace("include /tmp/resolver.conf;", "resolver 127.0.0.1 valid=10s;\n" + temp))
        path = os.path.join(self.dir, "nginx.conf")
        open(path, "w").write(conf)
        self.process = subprocess.Popen([nginx, "-p", self.dir, "-c", path, "-e", "stderr", "-g", "daemon off;"])
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("tonearm-load: nginx did not start")

    def pids(self):
        children = open(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read().split()
        return [self.process.pid, *map(int, children)]

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def urllib_get(url):
    import urllib.request
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def subprocess_run(arguments):
    import subprocess
    return subprocess.Popen(arguments, stdout=subprocess.PIPE, text=True)


if __name__ == "__main__":
    main()
