"""The `voice` row of tonearm-load: N guilds sending their audio to Discord's voice servers from one
pair, the Router making every voice connection itself (the `voice` command), judged by the
stand-in voice server of the tests (Tests/Fixtures/voice_server.py, --count-only: every packet
opened, no Opus decoded), which keeps the kernel's arrival time of each packet.

For each N: the N guilds play an Opus source passed through (the engine's cost is not this row's)
with no client first, then each gets its voice connection (a bot connects to /bot, sends `voice`
and leaves: the connection stays). Over --seconds of each: the Router's CPU and RSS; the cost of
the voice connections is the difference, per guild, against the ceiling's transcoding session.
At the stand-in: |interval − 20 ms| between each guild's packets (p50, p99, max) and the packets
more than 20 ms late.

With dave (--voice-dave): tonearm-dave beside the Router (bridges/dave) and the stand-in in
--dave mode, each guild a call of its own whose group the stand-in's listener founds, every frame
DAVE-encrypted by tonearm-dave and opened by the stand-in's listener; the cost per guild is then
the Router's and tonearm-dave's CPU together, and tonearm-dave's alone."""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "Tests", "Fixtures", "voice_server.py")
DAVE = os.path.join(ROOT, "bridges", "dave", "tonearm_dave.py")


def send_text(sock, text):
    """One masked text frame from a client (RFC 6455 §5.3), the mask all zero."""
    payload = text.encode()
    header = bytes([0x81])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    else:
        header += bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    sock.sendall(header + b"\0\0\0\0" + payload)


def report(control_port):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{control_port}/report", timeout=60) as response:
        return json.load(response)


def reset(control_port):
    import urllib.request
    request = urllib.request.Request(f"http://127.0.0.1:{control_port}/reset", method="POST")
    urllib.request.urlopen(request, timeout=10).read()


def control(control_port, path):
    import urllib.request
    request = urllib.request.Request(f"http://127.0.0.1:{control_port}{path}", method="POST")
    urllib.request.urlopen(request, timeout=10).read()


def row(tool, engine_class, router_class, cpu_seconds, rss_bytes, connect, token, counts, seconds, dave=False):
    per_session = tool.ffmpeg_per_session or (tool.ceiling() and tool.ffmpeg_per_session)
    for count in counts:
        print(f"voice: {count} guilds with Tonearm's own voice connection{' and DAVE' if dave else ''}, {seconds:g} s", flush=True)
        standin = subprocess.Popen([sys.executable, STANDIN, "--count-only"] + (["--dave"] if dave else []),
                                   stdout=subprocess.PIPE, text=True)
        ready = json.loads(standin.stdout.readline())
        environment = {"TONEARM_VOICE_CA_FILE": ready["ca"]}
        sidecar = None
        if dave:
            socket_path = os.path.join(tempfile.mkdtemp(prefix="tonearm-dave-"), "dave.sock")
            sidecar = subprocess.Popen([sys.executable, DAVE, "--socket", socket_path], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
            sidecar.stdout.readline()
            environment["TONEARM_DAVE_SOCKET"] = socket_path
        engine = engine_class(tool)
        router = router_class(tool, engine, environment)
        try:
            guilds = [f"voice-{i}" for i in range(count)]
            for guild in guilds:
                router.command(guild, "normalize", {"enabled": False})
                router.command(guild, "loop", {"mode": "track"})
                status, body = router.command(guild, "play", {"url": "music.webm"})
                if status != 202:
                    raise SystemExit(f"tonearm-load: play answered {status}: {body}")
            time.sleep(3)
            cpu0, t0 = cpu_seconds(router.pid), time.monotonic()
            time.sleep(seconds)
            alone = (cpu_seconds(router.pid) - cpu0) / (time.monotonic() - t0)
            rss_alone = rss_bytes(router.pid)
            for index, guild in enumerate(guilds):
                if dave:
                    control(ready["control_port"], f"/channel?server_id={guild}&channel_id={2000 + index}")
                sock, upgraded = connect(f"ws://127.0.0.1:{router.port}/bot?guild={guild}&token={token}")
                if not upgraded:
                    raise SystemExit(f"tonearm-load: /bot?guild={guild} was not upgraded")
                send_text(sock, json.dumps({
                    "op": "voice", "id": 1, "user_id": "1000", "session_id": f"s-{guild}", "channel_id": str(2000 + index),
                    "token": "voice-token", "endpoint": f"localhost:{ready['ws_port']}"}))
                time.sleep(0.05)  # the command read before the socket goes
                sock.close()
            deadline = time.monotonic() + 60
            while len(report(ready["control_port"])["streams"]) < count and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(2)
            reset(ready["control_port"])
            cpu0, t0 = cpu_seconds(router.pid), time.monotonic()
            dave0 = cpu_seconds(sidecar.pid) if sidecar else 0
            time.sleep(seconds)
            elapsed = time.monotonic() - t0
            with_voice = (cpu_seconds(router.pid) - cpu0) / elapsed
            dave_share = (cpu_seconds(sidecar.pid) - dave0) / elapsed if sidecar else 0
            rss_voice = rss_bytes(router.pid)
            heard = report(ready["control_port"])
        finally:
            router.stop()
            engine.stop()
            standin.kill()
            standin.wait()
            if sidecar:
                sidecar.kill()
                sidecar.wait()
        intervals = heard["intervals"]
        streams = heard["streams"].values()
        breaks = sum(s["sequence_breaks"] for s in streams)
        per_guild = (with_voice - alone + dave_share) / count
        command = f"Benchmarks/Load/tonearm-load --rows voice --voice-guilds {count} --voice-seconds {seconds:g}" + (
            " --voice-dave" if dave else "")
        with_dave = " with DAVE" if dave else ""
        opened = ""
        if dave:
            counts_ = [s.get("dave") or {} for s in streams]
            opened = (f", frames opened with DAVE {sum(c.get('dave', 0) for c in counts_):,}, "
                      f"plain {sum(c.get('plain', 0) for c in counts_)}, not opened {sum(c.get('failed', 0) for c in counts_)}")
        tool.row(f"voice{with_dave}: {count} guilds sending from one pair, packet interval at the stand-in",
                 f"{len(heard['streams'])} streams heard, interval − 20 ms (absolute) p50 {intervals['p50_ms']:.2f} ms, "
                 f"**p99 {intervals['p99_ms']:.2f} ms**, max {intervals['max_ms']:.1f} ms "
                 f"({intervals['count']:,} intervals), late (> 20 ms) {intervals['late']}, "
                 f"unopened {heard['unopened']}, sequence breaks {breaks}{opened}",
                 "p99 ≤ 5 ms, none late", command)
        dave_part = (f"; of it tonearm-dave {dave_share / count * 100:.3f} % = {dave_share / count / per_session:.2f}"
                     if dave else "")
        tool.row(f"voice{with_dave}: CPU and Router memory per guild's voice connection ({count} guilds)",
                 f"{per_guild * 100:.3f} % of a core = **{per_guild / per_session:.2f}** of a transcoding session "
                 f"(the ceiling's {per_session * 100:.3f} %); Router {alone * 100:.0f} % → {with_voice * 100:.0f} %{dave_part}; "
                 f"RSS +{(rss_voice - rss_alone) / count / 1024:.0f} KB per guild",
                 "≤ 0.1 of a transcoding session", command)
