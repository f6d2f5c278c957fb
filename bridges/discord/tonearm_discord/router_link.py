"""One guild's connection to the Router: ``GET /bot?guild=<id>`` with the bot token.

Binary messages are Opus packets and go into the guild's jitter buffer; text messages are the
guild's state, the engine's events and the replies to commands (docs/bot-protocol.md). The link
reconnects with backoff when the connection drops — the first message after a reconnection is
the state, so nothing else needs resynchronising — but not when the Router refuses the token
(401/403): retrying cannot fix that, so it stops and says why.

A connection can also die without closing: the Router's host cut off, its packets dropped. The link
notices within seconds: it pings every ``heartbeat`` seconds and gives up on a connection whose
pong does not come (aiohttp's heartbeat), and while the guild plays, when ``silence_timeout``
passes with nothing at all from the Router (a playing guild brings 50 frames and a ``progress``
every second). Such a connection is abandoned, and the link connects again at once, keeping the
audio it has buffered.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import quote

import aiohttp

from .jitter import JitterBuffer
from .waits import ExternalWait, direct

log = logging.getLogger("tonearm.link")

EventHandler = Callable[[dict[str, Any]], Awaitable[None] | None]


class TonearmError(Exception):
    """A refusal from Tonearm, with the Router's code and its sentence for the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Unauthorized(TonearmError):
    pass


class GuildLink:
    def __init__(
        self,
        router_url: str,
        token: str,
        guild_id: int | str,
        buffer: JitterBuffer,
        on_event: Optional[EventHandler] = None,
        *,
        session: Optional[aiohttp.ClientSession] = None,
        reply_timeout: float = 20.0,
        backoff: tuple[float, float] = (0.25, 10.0),
        wait: ExternalWait = direct,
        heartbeat: Optional[float] = 5.0,
        silence_timeout: Optional[float] = 2.0,
        frames: int = 1,
    ) -> None:
        self.router_url = router_url.rstrip("/")
        self.token = token
        self.guild_id = str(guild_id)
        self.buffer = buffer
        self.on_event = on_event
        self.reply_timeout = reply_timeout
        self.backoff = backoff
        self.wait = wait
        self.heartbeat = heartbeat
        self.silence_timeout = silence_timeout
        #: Opus packets per binary message asked of the Router (``frames=``; 1: one, unprefixed).
        self.frames = frames
        #: Binary messages and the Opus packets in them received so far.
        self.audio_messages = 0
        self.audio_packets = 0
        #: Connections given up because the Router went silent while the guild played.
        self.silent_connections = 0
        self.state: Optional[dict[str, Any]] = None
        self.connections = 0
        self._session = session
        self._owns_session = session is None
        self._ws: Optional[aiohttp.ClientWebSocketResponse] = None
        self._ids = itertools.count(1)
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._connected = asyncio.Event()
        self._task: Optional[asyncio.Task[None]] = None
        self._closing = False
        #: The last connection ended with 4012 (the session moved to another pair of a cluster),
        #: or was given up as silent: the next one follows at once, and the audio waiting in the
        #: buffer plays on.
        self._moved = False

    @property
    def url(self) -> str:
        ws = "wss" if self.router_url.startswith("https") else "ws"
        rest = self.router_url.split("://", 1)[1]
        frames = f"&frames={self.frames}" if self.frames > 1 else ""
        return f"{ws}://{rest}/bot?guild={quote(self.guild_id, safe='')}{frames}"

    def packets(self, data: bytes) -> list[bytes]:
        """The Opus packets of one binary message: the message itself, or with ``frames`` above
        one, each packet after its 2-byte big-endian length (docs/bot-protocol.md)."""
        if self.frames == 1:
            return [data]
        packets, at = [], 0
        while at + 2 <= len(data):
            size = int.from_bytes(data[at:at + 2], "big")
            if at + 2 + size > len(data):
                break
            packets.append(data[at + 2:at + 2 + size])
            at += 2 + size
        return packets

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"tonearm-link-{self.guild_id}")
        return self._task

    async def wait_connected(self, timeout: float) -> None:
        """Until the first state arrives; raises the reason the link gave up (401/403), or
        ``asyncio.TimeoutError``."""
        waiter = asyncio.ensure_future(self._connected.wait())
        watched = {waiter} | ({self._task} if self._task is not None else set())
        try:
            done, _ = await asyncio.wait(watched, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self._task is not None and self._task in done and self._task.exception() is not None:
            raise self._task.exception()
        if not self._connected.is_set():
            raise asyncio.TimeoutError()

    async def run(self) -> None:
        """Keeps the connection up until ``close()``; raises ``Unauthorized`` on 401/403."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        delay = self.backoff[0]
        try:
            while not self._closing:
                try:
                    await self._connect_once()
                    delay = self.backoff[0]
                except Unauthorized:
                    raise
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
                    log.warning("guild %s: Router connection failed: %s", self.guild_id, error)
                    self._moved = False  # a failed attempt waits its backoff like any other
                if self._closing:
                    break
                if self._moved:
                    # The session moved between pairs: its new owner kept the frames sent
                    # meanwhile, so connecting again at once hears nothing skipped.
                    continue
                # Jittered exponential backoff, so many guilds do not reconnect in step.
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, self.backoff[1])
        finally:
            if self._owns_session and self._session is not None:
                await self._session.close()

    async def _connect_once(self) -> None:
        assert self._session is not None
        try:
            ws = await self.wait(
                self._session.ws_connect(
                    self.url,
                    headers={"Authorization": f"Bearer {self.token}"},
                    heartbeat=self.heartbeat,
                    # Closing a connection whose Router went silent must not wait 10 s for its answer.
                    timeout=aiohttp.ClientWSTimeout(ws_close=1.0),
                    max_msg_size=1 << 20,
                ),
                reason="connecting to the Router",
            )
        except aiohttp.WSServerHandshakeError as error:
            if error.status in (401, 403):
                raise Unauthorized(
                    "unauthorized", f"the Router refused the bot token ({error.status}); check TONEARM_BOT_TOKEN"
                ) from error
            raise
        self._ws = ws
        self.connections += 1
        if not self._moved:
            self.buffer.clear()
        self._moved = False
        log.info("guild %s: connected to the Router (connection %d)", self.guild_id, self.connections)
        reason = ""
        silent = False
        try:
            while True:
                try:
                    message = await self.wait(ws.receive(timeout=self._receive_timeout()), reason="the Router's next message")
                except asyncio.TimeoutError:
                    silent = True
                    self.silent_connections += 1
                    log.warning(
                        "guild %s: nothing from the Router for %.1f s while playing; connecting again",
                        self.guild_id,
                        self.silence_timeout,
                    )
                    await ws.close()
                    break
                if message.type == aiohttp.WSMsgType.BINARY:
                    self.audio_messages += 1
                    for packet in self.packets(message.data):
                        self.audio_packets += 1
                        self.buffer.push(packet)
                elif message.type == aiohttp.WSMsgType.TEXT:
                    await self._text(message.data)
                elif message.type == aiohttp.WSMsgType.CLOSE:
                    reason = str(message.extra or "")
                    await ws.close()
                    break
                elif message.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                    break
            self._moved = silent or ws.close_code == 4012
            if ws.close_code in (4401, 4403):
                # The Router refuses a token after the upgrade: code 4000 + the HTTP status.
                raise Unauthorized(
                    "unauthorized",
                    f"the Router refused the bot token ({ws.close_code - 4000} {reason}); check TONEARM_BOT_TOKEN",
                )
        finally:
            self._ws = None
            self._connected.clear()
            for future in self._replies.values():
                if not future.done():
                    future.set_exception(TonearmError("disconnected", "the connection to Tonearm dropped; try again"))
            self._replies.clear()
            if not self._closing and ws.close_code not in (4401, 4403):
                log.warning(
                    "guild %s: Router connection closed (code %s); reconnecting", self.guild_id, ws.close_code
                )

    def _receive_timeout(self) -> Optional[float]:
        """How long the next message may take: bounded while the guild plays, else the heartbeat
        alone watches the connection."""
        playing = self.state is not None and self.state.get("status") == "playing" and not self.state.get("paused")
        return self.silence_timeout if playing and self.silence_timeout else None

    async def _text(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            log.warning("guild %s: a text message that is not JSON: %.80r", self.guild_id, text)
            return
        if not isinstance(message, dict):
            return
        kind = message.get("type")
        if kind == "reply":
            future = self._replies.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result(message)
            return
        if kind == "state":
            self.state = message
            self._connected.set()
        if self.on_event is not None:
            result = self.on_event(message)
            if asyncio.iscoroutine(result):
                await result

    async def command(self, op: str, **arguments: Any) -> dict[str, Any]:
        """Sends one command; answers the guild's state after it or raises ``TonearmError``."""
        state = (await self.request(op, **arguments)).get("state")
        return state if isinstance(state, dict) else {}

    async def request(self, op: str, **arguments: Any) -> dict[str, Any]:
        """Sends one command; answers the whole reply (`state`, and `layer` for a layer) or raises
        ``TonearmError``."""
        ws = self._ws
        if ws is None or not self.connected:
            raise TonearmError("not_connected", "Tonearm is not reachable right now; try again in a moment")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[request_id] = future
        await self.wait(ws.send_str(json.dumps({"op": op, "id": request_id, **arguments})), reason=f"sending {op}")
        try:
            reply = await self.wait(asyncio.wait_for(future, self.reply_timeout), reason=f"the Router's reply to {op}")
        except asyncio.TimeoutError:
            self._replies.pop(request_id, None)
            raise TonearmError("timeout", f"Tonearm did not answer {op} in time") from None
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise TonearmError(str(error.get("code", "error")), str(error.get("message", "Tonearm refused")))
        return reply

    async def close(self) -> None:
        self._closing = True
        if self._ws is not None:
            await self._ws.close()
        if self._task is not None:
            try:
                await self._task
            except Exception:  # the reason was logged where it happened
                pass
