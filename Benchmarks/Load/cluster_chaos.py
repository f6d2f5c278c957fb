"""The chaos row of tonearm-load: a cluster of three pairs (an engine and a Router each) on one real
PostgreSQL, --chaos-guilds guilds playing, each with a queue of three tracks and heard by a bot
that connects through the live Routers in turn (as behind a round-robin load balancer) and
connects again whenever its connection ends (at once on 4012, as the reference bot does). Every
--chaos-every seconds a random pair is SIGKILLed (both processes, as a host dying) and started
again on the same ports 5 s later, for --chaos-seconds.

Measured, from the outside only:
  * each guild's silence at every kill: the longest time between two frames its bot received
    from 1 s before the kill to 25 s after; a guild whose longest gap passes 1 s counts as moved
    (its pair died), the others only reconnected;
  * the longest silence of any guild over the whole run;
  * twice a second, every live engine's session list: a guild streaming on two engines at once
    is counted (it would be heard twice);
  * at the end, every guild's queue read through a Router: the three tracks, in order.
"""
import os, random, shutil, signal, subprocess, tempfile, threading, time

from ws_probe import connect, frames

QUEUE = ["tone.mp3", "music.mp3", "steps.mp3"]


class Postgres:
    """A PostgreSQL server of its own (Debian's binaries; run as the `postgres` user when root)."""

    def __init__(self, free_port, wait_for):
        root = "/usr/lib/postgresql"
        versions = sorted(int(v) for v in os.listdir(root) if v.isdigit()) if os.path.isdir(root) else []
        if not versions:
            raise SystemExit("tonearm-load: the chaos row needs PostgreSQL (apt-get install postgresql)")
        self.bin = f"{root}/{versions[-1]}/bin"
        # Under /tmp itself: the postgres user must reach it, and the tool's own folder is private.
        self.dir = tempfile.mkdtemp(prefix="tonearm-chaos-pg-")
        os.chmod(self.dir, 0o777)
        self.port = free_port()
        self.as_root = os.getuid() == 0
        data = os.path.join(self.dir, "data")
        subprocess.run(self.wrap([f"{self.bin}/initdb", "-D", data, "-U", "tonearm", "--auth=trust", "--no-sync",
                                  "-E", "UTF8"]), check=True, capture_output=True)
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.process = subprocess.Popen(
            self.wrap([f"{self.bin}/postgres", "-D", data, "-p", str(self.port), "-k", self.dir,
                       "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                       "-c", "max_connections=200"]), stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: subprocess.run([f"{self.bin}/pg_isready", "-h", "127.0.0.1", "-p", str(self.port), "-q"]
                                        ).returncode == 0, 20, "PostgreSQL")
        self.url = f"postgres://tonearm@127.0.0.1:{self.port}/postgres"

    def wrap(self, argv):
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else argv

    def stop(self):
        # runuser passes no signal on: stop the postmaster itself.
        try:
            with open(os.path.join(self.dir, "data", "postmaster.pid")) as f:
                os.kill(int(f.readline()), signal.SIGQUIT)
        except (OSError, ValueError):
            self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Pair:
    """An engine and a Router of the cluster, started again on the same ports after a kill."""

    def __init__(self, tool, index, database, free_port, token):
        self.tool, self.index, self.token = tool, index, token
        self.id = f"pair-{index}"
        self.engine_port, self.router_port = free_port(), free_port()
        self.socket = os.path.join(tool.work, f"chaos-{index}.sock")
        self.env = dict(
            os.environ, TONEARM_SOCKET=self.socket, TONEARM_ENGINE_PORT=str(self.engine_port),
            TONEARM_MEDIA_DIR=tool.media, TONEARM_NORMALIZE="false", TONEARM_ROUTER_PORT=str(self.router_port),
            TONEARM_ENGINE_URL=f"http://127.0.0.1:{self.engine_port}",
            TONEARM_DATA_DIR=tempfile.mkdtemp(dir=tool.work, prefix=f"chaos-router-{index}-"),
            TONEARM_BOT_TOKEN=token, TONEARM_DATABASE_URL=database, TONEARM_PAIR_ID=self.id,
            TONEARM_PAIR_ADDRESS=f"http://127.0.0.1:{self.router_port}", TONEARM_MAX_SESSIONS="60")
        self.alive = False
        self.start()

    def start(self):
        def launch(name):
            log = open(os.path.join(self.tool.work, f"chaos-{name.lower()}-{self.index}.log"), "a")
            return subprocess.Popen([os.path.join(self.tool.bin, name)], env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT), log
        self.engine, self.engine_log = launch("AudioEngine")
        self.router, self.router_log = launch("Router")
        self.alive = True

    def linked(self, http):
        status, body = http("GET", f"http://127.0.0.1:{self.router_port}/health", timeout=2)
        return status == 200 and body.get("engine", {}).get("connected")

    def kill(self):
        self.alive = False
        for process in (self.router, self.engine):
            process.send_signal(signal.SIGKILL)
            process.wait()
        self.engine_log.close()
        self.router_log.close()

    def stop(self):
        if not self.alive:
            return
        self.alive = False
        for process in (self.router, self.engine):
            process.send_signal(signal.SIGTERM)
        for process in (self.router, self.engine):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        self.engine_log.close()
        self.router_log.close()

    def streaming(self, http):
        """The guilds this pair's engine plays now (None when it does not answer)."""
        try:
            status, body = http("GET", f"http://127.0.0.1:{self.engine_port}/sessions", timeout=1)
        except (OSError, ValueError):
            return None
        if status != 200:
            return None
        # A play held for a hand-over's moment (start_at_ms) is not heard yet.
        return {s["session_id"] for s in body.get("sessions", [])
                if s.get("state") in ("extracting", "streaming") and "start_at_ms" not in s}


class Bot(threading.Thread):
    """One guild's `/bot` connection through the live Routers in turn, reconnecting on its own;
    keeps the arrival time of every frame."""

    def __init__(self, guild, ports, start, token):
        super().__init__(daemon=True)
        self.guild, self.ports, self.turn, self.token = guild, ports, start, token
        self.arrivals = []
        self.connections = 0
        self.running = True
        self.start()

    def run(self):
        while self.running:
            live = self.ports()
            if not live:
                time.sleep(0.1)
                continue
            port = live[self.turn % len(live)]
            self.turn += 1
            moved = False
            try:
                sock, upgraded = connect(f"ws://127.0.0.1:{port}/bot?guild={self.guild}&token={self.token}")
            except OSError:
                time.sleep(0.1)
                continue
            if upgraded:
                self.connections += 1
                for opcode, payload in frames(sock, time.monotonic() + 3600):
                    if opcode is None or not self.running:
                        break
                    if opcode == 0x2:
                        self.arrivals.append(time.monotonic())
                    elif opcode == 0x9:
                        sock.sendall(bytes([0x8A, 0x80 | len(payload), 0, 0, 0, 0]) + payload)
                    elif opcode == 0x8:
                        moved = payload[:2] == (4012).to_bytes(2, "big")
                        break
            sock.close()
            if not moved:
                time.sleep(0.1)

    def longest_gap(self, start, end):
        times = [t for t in self.arrivals if start <= t <= end]
        if not times:
            return end - start
        return max(b - a for a, b in zip([start] + times, times + [end]))


def run(tool, http, free_port, wait_for, percentile, token):
    args = tool.args
    seconds, every, count = args.chaos_seconds, args.chaos_every, args.chaos_guilds
    command = (f"Benchmarks/Load/tonearm-load --rows chaos --chaos-seconds {seconds:g} --chaos-every {every:g} "
               f"--chaos-guilds {count}")
    database = Postgres(free_port, wait_for)
    pairs = []
    bots = []
    try:
        pairs = [Pair(tool, index, database.url, free_port, token) for index in range(3)]
        for pair in pairs:
            wait_for(lambda: pair.linked(http), 30, f"{pair.id} to link to its engine")
        guilds = [f"chaos-{n}" for n in range(count)]
        for n, guild in enumerate(guilds):
            router = f"http://127.0.0.1:{pairs[n % 3].router_port}"
            status, body = http("POST", f"{router}/api/sessions/{guild}/play", {"url": QUEUE[0]}, token=token)
            if status not in (200, 202):
                raise SystemExit(f"tonearm-load: chaos play {guild} answered {status}: {body}")
            for url in QUEUE[1:]:
                http("POST", f"{router}/api/sessions/{guild}/queue", {"url": url}, token=token)
        ports = lambda: [p.router_port for p in pairs if p.alive]  # noqa: E731
        bots = [Bot(guild, ports, n, token) for n, guild in enumerate(guilds)]
        wait_for(lambda: all(len(b.arrivals) >= 100 for b in bots), 60, "every guild to be heard")

        twice = []  # (time, guild, pairs)
        watching = [True]

        def watch():
            while watching[0]:
                held = {}
                for pair in pairs:
                    if pair.alive:
                        for guild in pair.streaming(http) or ():
                            held.setdefault(guild, []).append(pair.id)
                twice.extend((time.monotonic(), g, p) for g, p in held.items() if len(p) > 1)
                time.sleep(0.5)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        started = time.monotonic()
        kills = []
        rng = random.Random(args.chaos_seed)
        while time.monotonic() - started + every <= seconds + 1:
            time.sleep(max(0, started + (len(kills) + 1) * every - time.monotonic()))
            victim = rng.choice(pairs)
            killed_at = time.monotonic()
            victim.kill()
            kills.append((killed_at, victim.id))
            print(f"  chaos: killed {victim.id} at {killed_at - started:.0f} s", flush=True)
            time.sleep(5)
            victim.start()
            wait_for(lambda: victim.linked(http), 30, f"{victim.id} to come back")
        time.sleep(max(0, started + seconds - time.monotonic()) + 10)
        watching[0] = False
        watcher.join()
        ended = time.monotonic()

        moves, silences = 0, []
        for killed_at, _ in kills:
            for bot in bots:
                gap = bot.longest_gap(killed_at - 1, min(killed_at + 25, ended))
                if gap > 1:
                    moves += 1
                    silences.append(gap)
        longest = max(bot.longest_gap(started, ended) for bot in bots)
        lost = []
        for guild in guilds:
            router = f"http://127.0.0.1:{pairs[0].router_port}"
            try:
                status, body = http("GET", f"{router}/api/sessions/{guild}", token=token)
            except OSError as error:
                status, body = str(error), {}
            urls = [track.get("url") for track in body.get("queue", [])] if status == 200 else None
            if urls != QUEUE:
                lost.append((guild, status, urls))
        print(f"  chaos: {len(kills)} kills, {moves} guild moves, queues differing: {lost[:5]}", flush=True)
        tool.row(f"chaos: silence of a guild whose pair was killed, p50 / p99 / max ({len(kills)} kills in "
                 f"{seconds:g} s, {moves} moves of {count} guilds)",
                 f"{percentile(silences, 0.5):.2f} / {percentile(silences, 0.99):.2f} / {max(silences or [0]):.2f} s",
                 "≤ 5 s", command)
        tool.row(f"chaos: longest silence of any guild over the run ({count} guilds)", f"{longest:.2f} s", "≤ 5 s",
                 command)
        tool.row("chaos: samples with a guild streaming on two engines (every 0.5 s)", str(len(twice)), "0", command)
        tool.row("chaos: guilds whose queue is not the three tracks queued, in order (read at the end)",
                 str(len(lost)), "0", command)
    finally:
        for bot in bots:
            bot.running = False
        for pair in pairs:
            pair.stop()
        database.stop()
