"""The `voice` row of tonearm-load: N guilds sending their audio to Discord's voice servers from one
pair, the Router making every voice connection itself (the `voice` command), judged by the
stand-in voice server of the tests (Tests/Fixtures/voice_server.py, --count-only: every packet
opened, no Opus decoded), which keeps the kernel's arrival time of each packet.

For each N: the N guilds play an Opus source passed through (the engine's cost is not this row's)
with no client first, then each gets its voice connection (a bot connects to /bot, sends `voice`
and leaves: the connection stays). Over --seconds of each: the Router's CPU and RSS; the cost of
the voice connections is the difference, per guild, against the ceiling's transcoding session.
At the stand-in: |interval − 20 ms| between each guild's packets (p50, p99, max) and the packets
more than 20 ms late."""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "Tests", "Fixtures", "voice_server.py")


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


def row(tool, engine_class, router_class, cpu_seconds, rss_bytes, connect, token, counts, seconds):
    per_session = tool.ffmpeg_per_session or (tool.ceiling() and tool.ffmpeg_per_session)
    for count in counts:
        print(f"voice: {count} guilds with Tonearm's own voice connection, {seconds:g} s", flush=True)
        standin = subprocess.Popen([sys.executable, STANDIN, "--count-only"], stdout=subprocess.PIPE, text=True)
        ready = json.loads(standin.stdout.readline())
        engine = engine_class(tool)
        router = router_class(tool, engine, {"TONEARM_VOICE_CA_FILE": ready["ca"]})
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
            for guild in guilds:
                sock, upgraded = connect(f"ws://127.0.0.1:{router.port}/bot?guild={guild}&token={token}")
                if not upgraded:
                    raise SystemExit(f"tonearm-load: /bot?guild={guild} was not upgraded")
                send_text(sock, json.dumps({
                    "op": "voice", "id": 1, "user_id": "1000", "session_id": f"s-{guild}", "channel_id": "2000",
                    "token": "voice-token", "endpoint": f"localhost:{ready['ws_port']}"}))
                time.sleep(0.05)  # the command read before the socket goes
                sock.close()
            deadline = time.monotonic() + 60
            while len(report(ready["control_port"])["streams"]) < count and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(2)
            reset(ready["control_port"])
            cpu0, t0 = cpu_seconds(router.pid), time.monotonic()
            time.sleep(seconds)
            with_voice = (cpu_seconds(router.pid) - cpu0) / (time.monotonic() - t0)
            rss_voice = rss_bytes(router.pid)
            heard = report(ready["control_port"])
        finally:
            router.stop()
            engine.stop()
            standin.kill()
            standin.wait()
        intervals = heard["intervals"]
        streams = heard["streams"].values()
        breaks = sum(s["sequence_breaks"] for s in streams)
        per_guild = (with_voice - alone) / count
        command = f"Benchmarks/Load/tonearm-load --rows voice --voice-guilds {count} --voice-seconds {seconds:g}"
        tool.row(f"voice: {count} guilds sending from one pair, packet interval at the stand-in",
                 f"{len(heard['streams'])} streams heard, interval − 20 ms (absolute) p50 {intervals['p50_ms']:.2f} ms, "
                 f"**p99 {intervals['p99_ms']:.2f} ms**, max {intervals['max_ms']:.1f} ms "
                 f"({intervals['count']:,} intervals), late (> 20 ms) {intervals['late']}, "
                 f"unopened {heard['unopened']}, sequence breaks {breaks}",
                 "p99 ≤ 5 ms, none late", command)
        tool.row(f"voice: Router CPU and memory per guild's voice connection ({count} guilds)",
                 f"{per_guild * 100:.3f} % of a core = **{per_guild / per_session:.2f}** of a transcoding session "
                 f"(the ceiling's {per_session * 100:.3f} %); Router {alone * 100:.0f} % → {with_voice * 100:.0f} %; "
                 f"RSS +{(rss_voice - rss_alone) / count / 1024:.0f} KB per guild",
                 "≤ 0.1 of a transcoding session", command)
