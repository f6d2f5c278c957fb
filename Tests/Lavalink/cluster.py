"""The pairs of a Tonearm cluster with Lavalink's API on, for one Lavalink client: a real
PostgreSQL (started here, trust on loopback), three engines and Routers sharing it, and one
public address in front of them that hands each new connection to the next Router that answers
(a round-robin balancer, as a bot's operator would put in front of a cluster)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
import json
from pathlib import Path

from conftest import REPO, bridge


class Postgres:
    """A PostgreSQL server of its own in a temporary directory; as the `postgres` user when root."""

    def __init__(self) -> None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
        if not versions:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        bin_dir = versions[-1].parent
        self.directory = tempfile.mkdtemp(prefix="tonearm-pg-")
        os.chmod(self.directory, 0o777)
        self.port = bridge.free_port()
        as_user = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        data = os.path.join(self.directory, "data")
        subprocess.run(as_user + [str(bin_dir / "initdb"), "-D", data, "-U", "tonearm", "--auth=trust", "--no-sync", "-E", "UTF8"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.log = open(os.path.join(self.directory, "server.log"), "ab")
        self.process = subprocess.Popen(
            as_user + [str(bin_dir / "postgres"), "-D", data, "-p", str(self.port), "-k", self.directory,
                       "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while subprocess.run([str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"]).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL did not start")
            time.sleep(0.1)
        self.url = f"postgres://tonearm@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


class Pair:
    """An engine and its Router, one pair of the cluster."""

    def __init__(self, index: int, work: Path, environment: dict[str, str]) -> None:
        bin_dir = os.environ.get("TONEARM_BIN_DIR") or subprocess.check_output(
            ["swift", "build", "-c", "release", "--show-bin-path"], cwd=REPO, text=True).strip()
        self.bin, self.work, self.index = Path(bin_dir), work / f"pair{index}", index
        self.work.mkdir()
        engine_port, self.port = bridge.free_port(), bridge.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ, "TONEARM_SOCKET": str(self.work / "engine.sock"), "TONEARM_DATA_DIR": str(self.work / "data"),
            "TONEARM_ENGINE_PORT": str(engine_port), "TONEARM_ENGINE_URL": f"http://127.0.0.1:{engine_port}",
            "TONEARM_ROUTER_HOST": "127.0.0.1", "TONEARM_ROUTER_PORT": str(self.port),
            "TONEARM_PAIR_ID": f"pair{index}", "TONEARM_PAIR_ADDRESS": self.url, **environment,
        }
        self.engine = self._spawn("AudioEngine")
        self.router = self._spawn("Router")

    def _spawn(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.work / f"{name}.log", "ab")
        return subprocess.Popen([str(self.bin / name)], env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
            return json.load(response)

    @property
    def alive(self) -> bool:
        return self.router.poll() is None

    def owns(self) -> int:
        return self.health()["cluster"]["owned_sessions"]

    def kill(self) -> None:
        for process in (self.router, self.engine):
            process.send_signal(signal.SIGKILL)
            process.wait()

    def terminate(self) -> None:
        """SIGTERM to the Router (it hands its sessions over, then stops), then to its engine."""
        self.router.terminate()
        self.router.wait(timeout=30)
        self.engine.terminate()
        self.engine.wait(timeout=10)

    stop = bridge.Cluster.stop  # the Router, then its engine


class RoundRobin:
    """One public address for the Routers: each new connection goes to the next one that accepts
    it. `went` says where each connection went, in order."""

    def __init__(self, ports: list[int]) -> None:
        self.ports, self.next, self.port = ports, 0, bridge.free_port()
        self.went: list[int] = []
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
            started.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        started.wait(5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(len(self.ports)):
            index = self.next % len(self.ports)
            self.next += 1
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.ports[index])
                break
            except OSError:
                continue
        else:
            writer.close()
            return
        self.went.append(index)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class LavalinkCluster:
    """Pairs on one PostgreSQL, behind one round-robin address (`url`)."""

    def __init__(self, work: Path, environment: dict[str, str], pairs: int) -> None:
        self.postgres = Postgres()
        environment = {**environment, "TONEARM_DATABASE_URL": self.postgres.url}
        self.pairs = [Pair(index, work, environment) for index in range(pairs)]
        deadline = time.monotonic() + 30
        for pair in self.pairs:
            while True:
                try:
                    if pair.health()["status"] == "ok":
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("a pair never joined:\n" + (pair.work / "Router.log").read_text()[-3000:])
                time.sleep(0.1)
        self.balancer = RoundRobin([pair.port for pair in self.pairs])
        self.url = f"http://127.0.0.1:{self.balancer.port}"

    def owner(self) -> Pair | None:
        owners = [pair for pair in self.pairs if pair.alive and pair.owns() > 0]
        return owners[0] if len(owners) == 1 else None

    def stop(self) -> None:
        self.balancer.stop()
        for pair in self.pairs:
            pair.stop()
        self.postgres.stop()
