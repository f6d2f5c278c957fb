"""The real engine and Router for the bridge's tests: release builds from TONEARM_BIN_DIR (or
`swift build -c release --show-bin-path`), on free ports, with tones in a media folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

# The repository around bridges/discord/tests (inside the bot's image the tests stand alone, and
# only the unit tests that need no cluster run there).
REPO = Path(__file__).resolve().parent.parent.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """An engine and a Router; the Router can be killed and started again on the same port."""

    def __init__(self, work: Path, environment: Optional[dict[str, str]] = None) -> None:
        bin_dir = os.environ.get("TONEARM_BIN_DIR") or subprocess.check_output(
            ["swift", "build", "-c", "release", "--show-bin-path"], cwd=REPO, text=True
        ).strip()
        self.bin = Path(bin_dir)
        self.work = work
        media = work / "media"
        media.mkdir()
        for frequency in (440, 880):
            subprocess.run(
                ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                 f"sine=f={frequency}:d=30", str(media / f"tone-{frequency}.mp3")],
                check=True,
            )
        self.token = "bridge-test-" + os.urandom(6).hex()
        engine_port, self.port = free_port(), free_port()
        self.env = {
            **os.environ,
            "TONEARM_SOCKET": str(work / "engine.sock"),
            "TONEARM_MEDIA_DIR": str(media),
            "TONEARM_DATA_DIR": str(work / "data"),
            "TONEARM_ENGINE_PORT": str(engine_port),
            "TONEARM_ENGINE_URL": f"http://127.0.0.1:{engine_port}",
            "TONEARM_ROUTER_PORT": str(self.port),
            "TONEARM_BOT_TOKEN": self.token,
            # Search without YouTube: answers ytsearch with made-up entries.
            "TONEARM_YTDLP": str(REPO / "Tests/Fixtures/fake-yt-dlp"),
            **(environment or {}),
        }
        self.url = f"http://127.0.0.1:{self.port}"
        self.engine = self._spawn("AudioEngine")
        self.router = self._spawn("Router")
        self.wait_linked()

    def _spawn(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.work / f"{name}.log", "ab")
        return subprocess.Popen([str(self.bin / name)], env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def health(self) -> str:
        with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
            return response.read().decode()

    def wait_linked(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if '"connected":true' in self.health():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the Router never linked to the engine:\n" + (self.work / "Router.log").read_text()[-2000:])

    def kill_router(self) -> None:
        self.router.send_signal(signal.SIGKILL)
        self.router.wait()

    def start_router(self) -> None:
        self.router = self._spawn("Router")
        self.wait_linked()

    def stop(self) -> None:
        for process in (self.router, self.engine):
            if process.poll() is None:
                process.terminate()
        for process in (self.router, self.engine):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def cluster(tmp_path: Path):
    running = Cluster(tmp_path)
    yield running
    running.stop()
