"""`python -m tonearm_discord`: the bot, and `/health` for compose.

Without Discord (no network, a wrong token) it keeps running, says why in its log once per
attempt, retries with backoff, and `/health` answers 503 with the reason, so an operator sees
the cause rather than a restart loop."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import aiohttp
import discord
from aiohttp import web

from .bot import TonearmBot
from .config import Config, ConfigError

log = logging.getLogger("tonearm.bridge")


async def serve_health(bot: TonearmBot, status: dict, port: int) -> web.AppRunner:
    async def health(_: web.Request) -> web.Response:
        body = {**bot.health(), **status}
        return web.json_response(body, status=200 if body["discord_connected"] else 503)

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = Config.from_environment()
    except ConfigError as error:
        log.error("%s", error)
        return 2
    bot = TonearmBot(config)
    status: dict = {"discord_error": None}
    runner = await serve_health(bot, status, config.health_port)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    delay = 5.0
    try:
        while not stop.is_set():
            run = asyncio.create_task(bot.start(config.discord_token))
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({run, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                run.cancel()
                break
            stopping.cancel()
            error = run.exception()
            if isinstance(error, discord.LoginFailure):
                status["discord_error"] = "Discord refused DISCORD_TOKEN; create a bot token (docs/discord.md)"
            elif isinstance(error, (aiohttp.ClientError, OSError, discord.GatewayNotFound)):
                status["discord_error"] = f"cannot reach Discord: {error}"
            else:
                status["discord_error"] = f"the Discord connection ended: {error!r}"
            log.error("%s; retrying in %.0f s", status["discord_error"], delay)
            await bot.close()
            bot = TonearmBot(config)
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, 300)
    finally:
        await bot.close()
        await runner.cleanup()
    return 0


def run() -> None:
    # Not asyncio.run: a look-up of Discord's name may still be running on the default executor's
    # thread (getaddrinfo cannot be cancelled, and a name server that does not answer holds it for
    # 10 s, past compose's stop_grace_period), and both asyncio.run and the interpreter's exit wait
    # for that thread. Everything the bot owns is closed when main returns, so the process ends
    # without waiting.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    code = loop.run_until_complete(main())
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
