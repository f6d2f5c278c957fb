"""The chaos row of tonearm-load: a cluster of three pairs (an engine and a Router each) on one real
PostgreSQL, --chaos-guilds guilds playing, each with a queue of three tracks and heard by a bot
that connects through the Routers in turn (as behind a round-robin load balancer that does not know
which pair is down), connects again whenever its connection ends (at once on 4012, as the reference
bot does), and gives up on one that is not made within a second or goes silent for 1.5 s (as the
reference bot's ping and receive timeout do). Every --chaos-every seconds something happens to a
random pair, in turn: it is SIGKILLed (both processes, as a host dying) and started again on the
same ports 5 s later; or, run as root, its host (each pair runs in a network namespace of its own)
is cut off from everything for --chaos-cut seconds (its packets dropped, its connections left
open) and then mended. For --chaos-seconds. With --chaos-database N the database is
pg_auto_failover's (postgres_ha.py: a primary and a synchronous standby, each on a host of its own
when root) and N of those events, spread over the run, strike its primary instead, in turn: killed
(and started again, as the standby), or, as root, cut off for 20 s from everything (a failover) or
from the pairs only (none).

Measured, from the outside only:
  * each guild's silence at every kill and every cut: the longest time between two frames its
    bot received from 1 s before to 25 s after; a guild whose longest gap passes 1 s counts as
    moved (its pair died or was cut off), the others only reconnected;
  * every guild's silence, measured the same way, at each strike on the database's primary, and
    how long until the standby took writes;
  * after every mend, every guild's longest silence until the next event (a healed pair must
    not take a guild it cannot keep);
  * the longest silence of any guild over the whole run;
  * every 0.1 s, every engine's session list (all asked at once, each play judged at the moment
    the last answer came: a play handed over at a moment already past is not heard): a guild on
    two engines at once is counted (it would be heard twice);
  * at the end, every guild's queue read through a Router: the three tracks, in order.
"""
import os, random, shutil, signal, subprocess, tempfile, threading, time

from chaos_network import Network
from postgres_ha import PostgresHA
from ws_probe import connect, frames

QUEUE = ["tone.mp3", "music.mp3", "steps.mp3"]
# How long the database's primary is cut off: longer than pg_auto_failover takes to promote the standby.
DATABASE_CUT = 20


class Postgres:
    """A PostgreSQL server of its own (Debian's binaries; run as the `postgres` user when root)."""

    def __init__(self, free_port, wait_for, also_listen=None):
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
        listen = "127.0.0.1"
        if also_listen:
            listen += "," + also_listen
            with open(os.path.join(data, "pg_hba.conf"), "a") as hba:
                hba.write(f"host all all {also_listen}/24 trust\n")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.process = subprocess.Popen(
            self.wrap([f"{self.bin}/postgres", "-D", data, "-p", str(self.port), "-k", self.dir,
                       "-c", f"listen_addresses={listen}", "-c", "fsync=off", "-c", "synchronous_commit=off",
                       "-c", "max_connections=200"]), stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: subprocess.run([f"{self.bin}/pg_isready", "-h", "127.0.0.1", "-p", str(self.port), "-q"]
                                        ).returncode == 0, 20, "PostgreSQL")
        self.url = f"postgres://tonearm@{also_listen or '127.0.0.1'}:{self.port}/postgres"

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

    def __init__(self, tool, index, database, free_port, token, network=None):
        self.tool, self.index, self.token = tool, index, token
        self.id = f"pair-{index}"
        self.host = network.hosts[index][1] if network else "127.0.0.1"
        self.launcher = network.launcher(index) if network else []
        self.engine_port, self.router_port = free_port(), free_port()
        self.address = f"{self.host}:{self.router_port}"
        self.socket = os.path.join(tool.work, f"chaos-{index}.sock")
        self.env = dict(
            os.environ, TONEARM_SOCKET=self.socket, TONEARM_ENGINE_PORT=str(self.engine_port),
            TONEARM_ENGINE_HOST=self.host, TONEARM_ROUTER_HOST=self.host,
            TONEARM_MEDIA_DIR=tool.media, TONEARM_NORMALIZE="false", TONEARM_ROUTER_PORT=str(self.router_port),
            TONEARM_ENGINE_URL=f"http://{self.host}:{self.engine_port}",
            TONEARM_DATA_DIR=tempfile.mkdtemp(dir=tool.work, prefix=f"chaos-router-{index}-"),
            TONEARM_BOT_TOKEN=token, TONEARM_DATABASE_URL=database, TONEARM_PAIR_ID=self.id,
            TONEARM_PAIR_ADDRESS=f"http://{self.address}", TONEARM_MAX_SESSIONS="60")
        self.alive = False
        self.start()

    def start(self):
        def launch(name):
            log = open(os.path.join(self.tool.work, f"chaos-{name.lower()}-{self.index}.log"), "a")
            return subprocess.Popen([*self.launcher, os.path.join(self.tool.bin, name)], env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT), log
        self.engine, self.engine_log = launch("AudioEngine")
        self.router, self.router_log = launch("Router")
        self.alive = True

    def linked(self, http):
        status, body = http("GET", f"http://{self.address}/health", timeout=2)
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

    def plays(self, http):
        """The plays this pair's engine lists now (None when it does not answer)."""
        try:
            status, body = http("GET", f"http://{self.host}:{self.engine_port}/sessions", timeout=1)
        except (OSError, ValueError):
            return None
        return body.get("sessions", []) if status == 200 else None


def heard(plays, moment_ms):
    """The guilds of an engine's plays heard at `moment_ms`: a play held for a hand-over's moment
    (start_at_ms) is not heard yet, one handed over at a moment already past no longer is."""
    return {p["session_id"] for p in plays if p.get("state") in ("extracting", "streaming")
            and "start_at_ms" not in p and p.get("handover_at_ms", moment_ms + 1) > moment_ms}


class Bot(threading.Thread):
    """One guild's `/bot` connection through the Routers in turn, reconnecting on its own, giving up
    on a connection not made in a second or silent for 1.5 s; keeps the arrival time of every frame."""

    def __init__(self, guild, addresses, start, token):
        super().__init__(daemon=True)
        self.guild, self.addresses, self.turn, self.token = guild, addresses, start, token
        self.arrivals = []
        self.connections = 0
        self.running = True
        self.start()

    def run(self):
        while self.running:
            live = self.addresses()
            if not live:
                time.sleep(0.1)
                continue
            address = live[self.turn % len(live)]
            self.turn += 1
            moved = False
            try:
                sock, upgraded = connect(f"ws://{address}/bot?guild={self.guild}&token={self.token}", timeout=1)
            except OSError:
                time.sleep(0.1)
                continue
            if upgraded:
                self.connections += 1
                for opcode, payload in frames(sock, time.monotonic() + 3600, silence=1.5):
                    if opcode in (None, "silent") or not self.running:
                        moved = opcode == "silent"  # left for its silence: at once, as after 4012
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
    seconds, every, count, cut_seconds = args.chaos_seconds, args.chaos_every, args.chaos_guilds, args.chaos_cut
    database_kills = args.chaos_database
    command = (f"Benchmarks/Load/tonearm-load --rows chaos --chaos-seconds {seconds:g} --chaos-every {every:g} "
               f"--chaos-guilds {count} --chaos-cut {cut_seconds:g}"
               + (f" --chaos-database {database_kills}" if database_kills else ""))
    network = None
    if cut_seconds > 0:
        if os.getuid() == 0:
            network = Network(5 if database_kills else 3)
        else:
            print("  chaos: not root, so no network namespaces: kills only, no cuts", flush=True)
    database = None
    pairs = []
    bots = []
    try:
        if database_kills:
            database = PostgresHA(free_port, wait_for, network=network)
        else:
            database = Postgres(free_port, wait_for, also_listen=network.outside if network else None)
        pairs = [Pair(tool, index, database.url, free_port, token, network) for index in range(3)]
        for pair in pairs:
            wait_for(lambda: pair.linked(http), 30, f"{pair.id} to link to its engine")
        guilds = [f"chaos-{n}" for n in range(count)]
        for n, guild in enumerate(guilds):
            router = f"http://{pairs[n % 3].address}"
            status, body = http("POST", f"{router}/api/sessions/{guild}/play", {"url": QUEUE[0]}, token=token)
            if status not in (200, 202):
                raise SystemExit(f"tonearm-load: chaos play {guild} answered {status}: {body}")
            for url in QUEUE[1:]:
                http("POST", f"{router}/api/sessions/{guild}/queue", {"url": url}, token=token)
        addresses = lambda: [p.address for p in pairs if p.alive]  # noqa: E731
        bots = [Bot(guild, addresses, n, token) for n, guild in enumerate(guilds)]
        wait_for(lambda: all(len(b.arrivals) >= 100 for b in bots), 60, "every guild to be heard")

        twice = []  # (time, guild, pairs)
        samples = [0]
        watching = [True]

        def watch():
            while watching[0]:
                asked = time.monotonic()
                answers = {}
                askers = [threading.Thread(target=lambda p=p: answers.__setitem__(p.id, p.plays(http)))
                          for p in pairs if p.alive]
                for asker in askers:
                    asker.start()
                for asker in askers:
                    asker.join()
                moment = int(time.time() * 1000)
                held = {}
                for pair_id, plays in answers.items():
                    for guild in heard(plays or [], moment):
                        held.setdefault(guild, []).append(pair_id)
                samples[0] += 1
                twice.extend((time.monotonic(), g, p) for g, p in held.items() if len(p) > 1)
                time.sleep(max(0, asked + 0.1 - time.monotonic()))
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        started = time.monotonic()
        events = []  # (kind, at, victim, mended at)
        kinds = ["kill", "cut"] if network else ["kill"]
        rng = random.Random(args.chaos_seed)
        # The database's primary is struck in slots spread evenly over the run, in place of a pair's event.
        slots = int((seconds + 1) // every)
        database_slots = {round((k + 1) * slots / (database_kills + 1)) - 1 for k in range(database_kills)}
        failovers = []  # seconds from a primary's kill or cut until the standby took writes
        # As root the database's primary is also cut off: from everything (the monitor promotes the
        # standby), or from the pairs only (the monitor sees nothing wrong: no failover).
        database_kinds = ["database", "database cut", "database cut from the pairs"] if network else ["database"]
        while time.monotonic() - started + every <= seconds + 1:
            time.sleep(max(0, started + (len(events) + 1) * every - time.monotonic()))
            victim = rng.choice(pairs)
            kind = kinds[sum(1 for e in events if e[0] in kinds) % len(kinds)]
            if len(events) in database_slots:
                kind = database_kinds[sum(1 for e in events if e[0] in database_kinds) % len(database_kinds)]
                database.settle(120)
            at = time.monotonic()
            if kind in database_kinds:
                node = database.primary()
                if node is None:
                    raise SystemExit("tonearm-load: chaos: no database node takes writes before the fault")
                if kind == "database":
                    database.kill(node)
                    print(f"  chaos: killed the database's primary (node {node}) at {at - started:.0f} s", flush=True)
                else:
                    host = database.host_indices[node]
                    network.cut(host, only_from=[p.host for p in pairs] if kind == "database cut from the pairs" else None)
                    print(f"  chaos: {kind}: node {node} at {at - started:.0f} s, for {DATABASE_CUT} s", flush=True)
                if kind != "database cut from the pairs":
                    wait_for(lambda: database.primary() not in (None, node), 60, "the database's standby to take writes")
                    failovers.append(time.monotonic() - at)
                if kind == "database":
                    database.restart(node)
                else:
                    time.sleep(max(0, at + DATABASE_CUT - time.monotonic()))
                    network.mend(host)
                events.append((kind, at, f"database node {node}", None))
            elif kind == "kill":
                victim.kill()
                print(f"  chaos: killed {victim.id} at {at - started:.0f} s", flush=True)
                time.sleep(5)
                victim.start()
                wait_for(lambda: victim.linked(http), 30, f"{victim.id} to come back")
                events.append((kind, at, victim.id, None))
            else:
                network.cut(victim.index, victim.engine_port)
                print(f"  chaos: cut {victim.id} off at {at - started:.0f} s", flush=True)
                time.sleep(cut_seconds)
                network.mend(victim.index)
                events.append((kind, at, victim.id, time.monotonic()))
        time.sleep(max(0, started + seconds - time.monotonic()) + 10)
        watching[0] = False
        watcher.join()
        ended = time.monotonic()

        silences = {"kill": [], "cut": [], "database": [], "database cut": [], "database cut from the pairs": []}
        after_mend = []
        for n, (kind, at, _, mended) in enumerate(events):
            following = events[n + 1][1] if n + 1 < len(events) else ended
            for bot in bots:
                gap = bot.longest_gap(at - 1, min(at + 25, following, ended))
                if gap > 1 or kind in database_kinds:  # every guild's pair loses the database
                    silences[kind].append(gap)
                if mended is not None:
                    after_mend.append(bot.longest_gap(mended, following))
        longest = max(bot.longest_gap(started, ended) for bot in bots)
        lost = []
        for guild in guilds:
            router = f"http://{pairs[0].address}"
            try:
                status, body = http("GET", f"{router}/api/sessions/{guild}", token=token)
            except OSError as error:
                status, body = str(error), {}
            urls = [track.get("url") for track in body.get("queue", [])] if status == 200 else None
            if urls != QUEUE:
                lost.append((guild, status, urls))
        kills, cuts = (sum(1 for e in events if e[0] == k) for k in ("kill", "cut"))
        # A guild is silent through the database's failover: the pairs stop at the fence until the standby takes writes.
        longest_target = 15 if database_kills else 5
        print(f"  chaos: {kills} kills, {cuts} cuts, {len(silences['kill']) + len(silences['cut'])} guild moves, "
              f"{samples[0]} samples, queues differing: {lost[:5]}", flush=True)

        if twice or lost or longest > longest_target or max(after_mend or [0]) > 1:
            kept = f"/tmp/tonearm-chaos-logs-{int(time.time())}"
            os.makedirs(kept, exist_ok=True)
            for name in os.listdir(tool.work):
                if name.startswith("chaos-") and name.endswith(".log"):
                    shutil.copy(os.path.join(tool.work, name), kept)
            with open(os.path.join(kept, "events.txt"), "w") as out:
                for kind, at, victim, mended in events:
                    out.write(f"{kind} {victim} at {at - started:.1f} s" + (f", mended at {mended - started:.1f} s" if mended else "") + "\n")
                for bot in bots:
                    gaps = [(b - a, a - started) for a, b in zip(bot.arrivals, bot.arrivals[1:]) if b - a > 1]
                    out.write(f"{bot.guild}: connections {bot.connections}, gaps over 1 s (length, at) "
                              + ", ".join(f"{g:.1f}@{t:.1f}" for g, t in gaps) + "\n")
            print(f"  chaos: a figure missed its target; the pairs' logs are kept in {kept}", flush=True)

        def spread(values):
            return f"{percentile(values, 0.5):.2f} / {percentile(values, 0.99):.2f} / {max(values or [0]):.2f} s"
        tool.row(f"chaos: silence of a guild whose pair was killed, p50 / p99 / max ({kills} kills in "
                 f"{seconds:g} s, {len(silences['kill'])} moves of {count} guilds)", spread(silences["kill"]), "≤ 5 s",
                 command)
        if network:
            tool.row(f"chaos: silence of a guild whose pair was cut off for {cut_seconds:g} s, p50 / p99 / max ({cuts} cuts, "
                     f"{len(silences['cut'])} moves)", spread(silences["cut"]), "≤ 5 s", command)
            tool.row("chaos: longest silence of any guild after a mend, until the next event",
                     f"{max(after_mend or [0]):.2f} s", "≤ 1 s", command)
        described = {"database": "the database's primary was killed",
                     "database cut": f"the database's primary was cut off from everything for {DATABASE_CUT} s",
                     "database cut from the pairs": f"the database's primary was cut off from the pairs only for {DATABASE_CUT} s"}
        for kind in database_kinds if database_kills else []:
            faults = sum(1 for e in events if e[0] == kind)
            tool.row(f"chaos: silence of every guild when {described[kind]}, p50 / p99 / max ({faults} times, "
                     f"{len(silences[kind])} guild silences)", spread(silences[kind]), "≤ 15 s at p99", command)
        if failovers:
            tool.row("chaos: the database's failover: from the primary's kill or cut until the standby took writes",
                     ", ".join(f"{f:.1f}" for f in failovers) + " s", "–", command)
        tool.row(f"chaos: longest silence of any guild over the run ({count} guilds)", f"{longest:.2f} s",
                 f"≤ {longest_target} s", command)
        tool.row(f"chaos: samples with a guild on two engines (every 0.1 s, {samples[0]} samples)", str(len(twice)), "0",
                 command)
        tool.row("chaos: guilds whose queue is not the three tracks queued, in order (read at the end)",
                 str(len(lost)), "0", command)
    finally:
        for bot in bots:
            bot.running = False
        for pair in pairs:
            pair.stop()
        if database:
            database.stop()
        if network:
            network.remove()
