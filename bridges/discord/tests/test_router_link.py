"""The link's reconnection rules against a local WebSocket server playing the Router's part:
a close with 4012 (the guild moved to another pair of a cluster) is followed at once and keeps the
audio already buffered, since the new owner continues the stream; any other close waits its
backoff and starts the buffer afresh."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from tonearm_discord.jitter import JitterBuffer
from tonearm_discord.router_link import GuildLink


async def serve(handler) -> tuple[web.AppRunner, int]:
    """A local stand-in for the Router's /bot: its runner and port."""
    app = web.Application()
    app.router.add_get("/bot", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]



async def scenario(close_code: int) -> tuple[float, int, list[int]]:
    connected_at: list[float] = []
    closed_at: list[float] = []
    waiting: list[int] = []
    link_box: list[GuildLink] = []

    async def bot(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        connected_at.append(time.monotonic())
        if len(connected_at) > 1:
            waiting.append(link_box[0].buffer.waiting)
        await ws.send_str(json.dumps({"type": "state", "status": "playing"}))
        for frame in range(3):
            await ws.send_bytes(bytes([0xFC, frame]))
        if len(connected_at) == 1:
            await asyncio.sleep(0.05)  # the frames reach the link first
            closed_at.append(time.monotonic())
            await ws.close(code=close_code, message=b"session_moved")
        else:
            await asyncio.sleep(0.05)
            waiting.append(link_box[0].buffer.waiting)
            await ws.close()
        return ws

    runner, port = await serve(bot)
    link = GuildLink(f"http://127.0.0.1:{port}", "token", "42", JitterBuffer(start_packets=3, cap_packets=20))
    link_box.append(link)
    link.start()
    try:
        for _ in range(200):
            if len(waiting) >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        await link.close()
        await runner.cleanup()
    return connected_at[1] - closed_at[0], link.connections, waiting


def test_a_moved_guild_reconnects_at_once_and_keeps_its_audio() -> None:
    delay, connections, waiting = asyncio.run(scenario(4012))
    assert connections >= 2
    assert delay < 0.1, f"reconnected {delay:.3f} s after 4012: it waited a backoff"
    # Three frames from the old pair still waiting when the new connection opens, then three more.
    assert waiting == [3, 6], waiting


def test_any_other_close_waits_its_backoff_and_starts_afresh() -> None:
    delay, connections, waiting = asyncio.run(scenario(1011))
    assert connections >= 2
    assert delay >= 0.12, f"reconnected {delay:.3f} s after 1011: no backoff"
    assert waiting == [3, 3], waiting


async def silent_router(status: str, silence_timeout: float) -> tuple[float, int, int]:
    """A Router whose first connection goes quiet without closing (its host cut off): it sends
    the guild's state and three frames, then nothing. The second connection is answered normally.
    Answers how long after the last frame the link connected again, the connections made, and
    the audio still buffered when it did."""
    last_frame_at: list[float] = []
    connected_at: list[float] = []
    waiting: list[int] = []
    link_box: list[GuildLink] = []
    hold = asyncio.Event()

    async def bot(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        connected_at.append(time.monotonic())
        if len(connected_at) > 1:
            waiting.append(link_box[0].buffer.waiting)
            await ws.send_str(json.dumps({"type": "state", "status": status}))
            await hold.wait()
            return ws
        await ws.send_str(json.dumps({"type": "state", "status": status}))
        for frame in range(3):
            await ws.send_bytes(bytes([0xFC, frame]))
        last_frame_at.append(time.monotonic())
        await hold.wait()  # silent from here on, the connection left open, pings unanswered
        return ws

    runner, port = await serve(bot)
    link = GuildLink(
        f"http://127.0.0.1:{port}", "token", "42", JitterBuffer(start_packets=3, cap_packets=20),
        heartbeat=30.0, silence_timeout=silence_timeout,
    )
    link_box.append(link)
    link.start()
    try:
        for _ in range(150):
            if len(connected_at) >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        hold.set()
        await link.close()
        await runner.cleanup()
    delay = connected_at[1] - last_frame_at[0] if len(connected_at) > 1 else float("inf")
    return delay, link.silent_connections, waiting[0] if waiting else -1


def test_a_router_gone_silent_while_playing_is_left_and_the_audio_kept() -> None:
    delay, silent, waiting = asyncio.run(silent_router("playing", 0.3))
    assert silent == 1
    assert 0.25 < delay < 1.0, f"connected again {delay:.3f} s after the last frame"
    assert waiting == 3, "the frames buffered before the silence were dropped"


def test_an_idle_guild_is_not_left_for_its_quiet() -> None:
    # Nothing arrives while a guild is idle: only the heartbeat (30 s here) watches it.
    delay, silent, _ = asyncio.run(silent_router("idle", 0.3))
    assert silent == 0 and delay == float("inf")
