"""The `station` row of tonearm-load: one session (the station, its Opus passed through) followed
by N guild sessions, each heard by one bot connection (`tonearm-listeners`, a process of its
own, so its CPU is accounted apart). Measured over the same steady window: the engine's CPU
against the same engine with the station alone just before (the followers should cost it
nothing), the engine's late frames, the Router's CPU per frame per follower, and engine → bot
latency (every follower matched at the tap by the station's packets), and how far apart in time
the first and the last follower read each frame (an upper bound: the listeners' one thread reads
every follower's socket in turn, and its own time is in the figure)."""
import json, os, subprocess, time


def start_station(router):
    """Session `station` plays the music passed through (the Router's cost is the row's), looped:
    the row outlasts the track."""
    router.command("station", "normalize", {"enabled": False})
    router.command("station", "loop", {"mode": "track"})
    status, body = router.command("station", "play", {"url": "music.webm"})
    if status != 202:
        raise SystemExit(f"tonearm-load: play answered {status}: {body}")


def row(tool, engine_class, router_class, cpu_seconds, bot_token, counts, seconds, frames):
    listeners_bin = os.path.join(tool.bin, "tonearm-listeners")
    per_message = "" if frames == 1 else f", {frames} frames per message"
    for followers in counts:
        print(f"station: 1 station, {followers} followers{per_message}, {seconds:g} s", flush=True)
        engine = engine_class(tool)
        router = router_class(tool, engine)
        try:
            start_station(router)
            guilds = [f"follower-{index}" for index in range(followers)]
            for guild in guilds:
                status, body = router.command(guild, "follow", {"station": "station"})
                if status != 200:
                    raise SystemExit(f"tonearm-load: follow answered {status}: {body}")
            time.sleep(2)
            e0, t0 = cpu_seconds(engine.pid), time.monotonic()
            time.sleep(min(seconds, 10))
            alone = (cpu_seconds(engine.pid) - e0) / (time.monotonic() - t0)
            client = subprocess.Popen(
                [listeners_bin, "--port", str(router.port), "--guilds", ",".join(guilds), "--per-guild", "1",
                 "--token", bot_token, "--seconds", str(seconds + 3), "--tap", engine.socket,
                 "--frames", str(frames), "--station", "station"],
                stdout=subprocess.PIPE, text=True)
            time.sleep(3)  # connections made; measure the steady part
            before, frames_before = router.metrics(), engine.health()["frames"]
            cpu0, ecpu0, lcpu0, t0 = cpu_seconds(router.pid), cpu_seconds(engine.pid), cpu_seconds(client.pid), time.monotonic()
            time.sleep(seconds)
            cpu1, ecpu1, lcpu1, t1 = cpu_seconds(router.pid), cpu_seconds(engine.pid), cpu_seconds(client.pid), time.monotonic()
            after, frames_after = router.metrics(), engine.health()["frames"]
            out, _ = client.communicate(timeout=60)
            report = json.loads(out)
        finally:
            router.stop()
            engine.stop()
        routed = sum(v for k, v in after.items() if k.startswith("tonearm_router_frames_routed")) - \
            sum(v for k, v in before.items() if k.startswith("tonearm_router_frames_routed"))
        dropped = sum(v for k, v in after.items() if k.startswith("tonearm_router_frames_dropped")) - \
            sum(v for k, v in before.items() if k.startswith("tonearm_router_frames_dropped"))
        late = sum(frames_after[kind] - frames_before[kind] for kind in ("nulled", "deficit"))
        delivered = routed * followers  # the station's frames, to every follower's bot
        elapsed = t1 - t0
        command = (f"Benchmarks/Load/tonearm-load --rows station --station-followers {followers} "
                   f"--station-seconds {seconds:g}" + ("" if frames == 1 else f" --station-frames {frames}"))
        label = f"{report['listeners']} followers{per_message}"
        tool.row(f"station: the engine with {label}",
                 f"{(ecpu1 - ecpu0) / elapsed * 100:.2f} % of a core, the station alone just before "
                 f"{alone * 100:.2f} %; late frames {late}",
                 "that of one session, 0 late", command)
        tool.row(f"station: Router CPU per frame per follower ({label})",
                 f"{(cpu1 - cpu0) / max(delivered, 1) * 1e6:.2f} µs (Router {(cpu1 - cpu0) / elapsed * 100:.0f} %, "
                 f"the listeners' process {(lcpu1 - lcpu0) / elapsed * 100:.0f} % of a core); "
                 f"{report['frames_per_second']:,.0f} frames/s read, dropped {dropped:.0f}, closed {report['closed']}",
                 "≤ 3 µs", command)
        tool.row(f"station: engine → follower latency ({label})",
                 f"p50 {report['latency_p50_ms']:.2f} ms, p99 {report['latency_p99_ms']:.2f} ms, "
                 f"max {report['latency_max_ms']:.1f} ms ({report['latency_samples']:,} frames, "
                 f"{report['latency_unmatched']:,} unmatched)", "–", command)
        tool.row(f"station: how far apart the followers read the same frame ({label})",
                 f"p50 {report['spread_p50_ms']:.2f} ms, p99 {report['spread_p99_ms']:.2f} ms, "
                 f"max {report['spread_max_ms']:.1f} ms ({report['spread_samples']:,} frames read by every "
                 f"follower, {report['spread_incomplete']:,} not), the listeners' own reading included",
                 "within 20 ms", command)
