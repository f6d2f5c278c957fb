"""The `lavalink` row of tonearm-load: Lavalink players driven through the Router's Lavalink v4 API
(docs/lavalink.md), as a Lavalink client drives them: one WebSocket session, players made by
PATCH with a track and Discord's voice credentials, heard at stand-in voice servers
(Tests/Fixtures/voice_server.py) through the voice connections the Router makes itself.

- --lavalink-load (a share of the ceiling, 80 % by default) players of the music-like MP3, heard
  at a stand-in that opens every packet but decodes none (--count-only); over --lavalink-seconds,
  the engine's and the Router's CPU together, per playing player, against the ceiling's session;
- meanwhile one more player plays the 440 Hz tone to a stand-in that decodes it: --lavalink-samples
  times, `PATCH volume` 30 → the first quieter packet at the stand-in, by the kernel's arrival
  time (the same clock as the request's), then back to 100;
- then players are added up to --lavalink-frames-load (85 % by default), and the `frameStats` of
  the `stats` op (every 10 s here, --lavalink-stats-seconds) are read once a whole interval has passed at that load.
"""
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "Tests", "Fixtures", "voice_server.py")
PASSWORD = "tonearm-load"
USER = "104694319306248192"


def lavalink(router, method, path, body=None):
    """One request to the Router's Lavalink API: (status, JSON body)."""
    request = urllib.request.Request(router.url + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": PASSWORD, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class Session(threading.Thread):
    """The client's WebSocket (`/v4/websocket`): its session id, and every `stats` op with the
    time it came."""

    def __init__(self, router, frames):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", router.port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /v4/websocket HTTP/1.1\r\nHost: 127.0.0.1:{router.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           f"Authorization: {PASSWORD}\r\nUser-Id: {USER}\r\nClient-Name: tonearm-load\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise SystemExit(f"tonearm-load: /v4/websocket was not upgraded: {head[:80]!r}")
        self.frames = frames
        self.session_id = None
        self.stats = []  # (monotonic time, the stats op)
        self.ready = threading.Event()
        self.start()

    def run(self):
        for opcode, payload in self.frames(self.sock, time.monotonic() + 3600):
            if opcode != 1:
                if opcode is None:
                    return
                continue
            message = json.loads(payload)
            if message.get("op") == "ready":
                self.session_id = message["sessionId"]
                self.ready.set()
            elif message.get("op") == "stats":
                self.stats.append((time.monotonic(), message))

    def close(self):
        self.sock.close()


def row(tool, engine_class, router_class, cpu_seconds, frames, load, frames_load, samples, seconds, stats_seconds=10):
    tool.ceiling()
    per_session = tool.ffmpeg_per_session
    count, top = tool.sessions(load), tool.sessions(frames_load)
    print(f"lavalink: {count} players, then {top}; {samples} volume samples; {seconds:g} s", flush=True)
    standins = []
    authority = os.path.join(tool.work, "voice-ca")  # one certificate authority for both stand-ins
    os.makedirs(authority, exist_ok=True)
    for extra in (["--count-only"], []):
        standin = subprocess.Popen([sys.executable, STANDIN, "--authority", authority, *extra], stdout=subprocess.PIPE, text=True)
        standins.append((standin, json.loads(standin.stdout.readline())))
    (_, crowd), (_, judge) = standins
    # At its defaults, as a node serving Lavalink clients runs: admission on (a budget of 75 % of
    # the cores) and the Opus complexity lowered under load (what the overload row measures).
    engine = engine_class(tool, admission=True)
    router = router_class(tool, engine, {
        "TONEARM_LAVALINK_PASSWORD": PASSWORD, "TONEARM_VOICE_CA_FILE": judge["ca"], "TONEARM_NORMALIZE": "false",
        "TONEARM_LAVALINK_STATS_INTERVAL": str(stats_seconds), "TONEARM_LAVALINK_PLAYER_UPDATE_INTERVAL": "1"})
    session = Session(router, frames)
    try:
        if not session.ready.wait(10):
            raise SystemExit("tonearm-load: no ready op on /v4/websocket")
        tracks = {}
        for name in ("music.mp3", "tone.mp3"):
            status, loaded = lavalink(router, "GET", "/v4/loadtracks?identifier=" + urllib.parse.quote(name))
            if status != 200 or loaded.get("loadType") != "track":
                raise SystemExit(f"tonearm-load: loadtracks {name} answered {status}: {loaded}")
            tracks[name] = loaded["data"]["encoded"]

        def player(guild, track, standin, **fields):
            body = {"track": {"encoded": tracks[track]}, "voice": {
                "token": "voice-token", "endpoint": f"localhost:{standin['ws_port']}", "sessionId": f"voice-{guild}",
                "channelId": str(guild)}, **fields}
            status, answer = lavalink(router, "PATCH", f"/v4/sessions/{session.session_id}/players/{guild}", body)
            if status != 200:
                raise SystemExit(f"tonearm-load: PATCH player {guild} answered {status}: {answer}")

        guild0 = 900_000_000_000_000_000
        for index in range(count):
            player(guild0 + index, "music.mp3", crowd)
        measured = guild0 - 1
        player(measured, "tone.mp3", judge)
        wait_streams = time.monotonic() + 60
        while time.monotonic() < wait_streams:
            heard = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{crowd['control_port']}/report", timeout=60).read())
            if len(heard["streams"]) >= count:
                break
            time.sleep(1)
        time.sleep(3)

        def levels(since):
            answer = urllib.request.urlopen(f"http://127.0.0.1:{judge['control_port']}/levels?since={since}", timeout=10).read()
            return [p for packets in json.loads(answer).values() for p in packets]

        pids = (engine.pid, router.pid)
        cpu0, t0 = sum(cpu_seconds(pid) for pid in pids), time.monotonic()
        judges0 = sum(cpu_seconds(standin.pid) for standin, _ in standins)
        latencies = []
        for _ in range(samples):
            time.sleep(0.3)
            level = statistics.median(db for _, db in levels(time.time() - 0.5)[-20:])
            sent = time.time()
            lavalink(router, "PATCH", f"/v4/sessions/{session.session_id}/players/{measured}", {"volume": 30})
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                quieter = [arrival for arrival, db in levels(sent) if db is not None and db < level - 0.5]
                if quieter:
                    latencies.append((quieter[0] - sent) * 1000)
                    break
                time.sleep(0.05)
            else:
                raise SystemExit("tonearm-load: no quieter packet within 5 s of PATCH volume")
            lavalink(router, "PATCH", f"/v4/sessions/{session.session_id}/players/{measured}", {"volume": 100})
        elapsed = max(seconds - (time.monotonic() - t0), 0)
        time.sleep(elapsed)
        cpu = (sum(cpu_seconds(pid) for pid in pids) - cpu0) / (time.monotonic() - t0)
        judges = (sum(cpu_seconds(standin.pid) for standin, _ in standins) - judges0) / (time.monotonic() - t0)
        complexity = engine.health()["load"]["complexity"]

        for index in range(count, top):
            player(guild0 + index, "music.mp3", crowd)
        topped = time.monotonic()
        deadline = topped + 3 * stats_seconds + 30
        while time.monotonic() < deadline and not [s for at, s in session.stats if at > topped + stats_seconds + 1]:
            time.sleep(0.5)
        read = [s for at, s in session.stats if at > topped + stats_seconds + 1]
        frame_stats = read[0].get("frameStats") if read else None
        playing = read[0].get("playingPlayers") if read else None
        top_load = engine.health()["load"]
    finally:
        session.close()
        router.stop()
        engine.stop()
        for standin, _ in standins:
            standin.kill()
            standin.wait()
    players = count + 1
    share = f"{count / tool.ceiling_sessions * 100:.0f} % of the ceiling" if tool.ceiling_sessions else ""
    command = (f"Benchmarks/Load/tonearm-load --rows lavalink --lavalink-load {tool.args.lavalink_load} "
               f"--lavalink-frames-load {tool.args.lavalink_frames_load} --lavalink-samples {samples} "
               f"--lavalink-seconds {seconds:g}")
    tool.row(f"lavalink: PATCH volume → first changed packet at the stand-in ({count} other players, {share})",
             f"p50 {statistics.median(latencies):.0f} ms, **p99 {sorted(latencies)[min(len(latencies) - 1, int(len(latencies) * 0.99))]:.0f} ms**, "
             f"max {max(latencies):.0f} ms ({len(latencies)} samples)", "p99 ≤ 40 ms at 80 % of the ceiling", command)
    tool.row(f"lavalink: CPU per playing Lavalink player (engine and Router, {players} players)",
             f"{cpu / players * 100:.3f} % of a core = **{cpu / players / per_session:.2f}** of the ceiling's session "
             f"({per_session * 100:.3f} %: the ffmpeg CLI's encode alone, complexity 10); the engine encoding at "
             f"complexity {complexity}; the stand-ins beside them took {judges * 100:.0f} % of a core", "–", command)
    top_share = f"{top / tool.ceiling_sessions * 100:.0f} % of the ceiling" if tool.ceiling_sessions else ""
    counted = (f"sent {frame_stats['sent']}, **nulled {frame_stats['nulled']}, deficit {frame_stats['deficit']}**"
               if frame_stats else "none read")
    tool.row(f"lavalink: frameStats a client reads at {top + 1} players ({top_share})",
             f"{counted} per player a minute ({playing} playing; the stats op over {stats_seconds} s; the engine at "
             f"complexity {top_load['complexity']}, {top_load['refusals']} plays refused)",
             "0 nulled, 0 deficit at 85 % of the ceiling", command)
