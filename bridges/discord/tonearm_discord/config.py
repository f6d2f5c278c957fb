"""Settings from the environment (deploy/.env in compose)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Config:
    discord_token: str
    bot_token: str
    router_url: str = "http://127.0.0.1:8080"
    idle_leave_seconds: float = 300.0
    health_port: int = 8090
    playground_url: Optional[str] = None
    #: How often each guild's link pings the Router, and how long it waits for anything while the
    #: guild plays, before it gives up on a connection that died without closing (None: never).
    router_ping_seconds: Optional[float] = 5.0
    router_silence_seconds: Optional[float] = 2.0
    #: Who sends the audio to Discord: "discord" (discord.py's voice client, with DAVE) or
    #: "tonearm" (Tonearm's own voice connection; the bot forwards its voice events). Discord
    #: refuses the second today: Tonearm does not speak DAVE yet (docs/discord.md).
    voice: str = "discord"
    #: Opus packets per message from the Router (``frames=``, 1–10): each message costs the
    #: Router one write whatever it holds, and the jitter buffer takes them one by one.
    frames_per_message: int = 1

    @staticmethod
    def from_environment(environment: Mapping[str, str] = os.environ) -> "Config":
        missing = [name for name in ("DISCORD_TOKEN", "TONEARM_BOT_TOKEN") if not environment.get(name)]
        if missing:
            raise ConfigError(f"{' and '.join(missing)} must be set (deploy/.env)")
        try:
            idle = float(environment.get("TONEARM_IDLE_LEAVE_SECONDS", "300"))
            port = int(environment.get("TONEARM_BRIDGE_HEALTH_PORT", "8090"))
        except ValueError as error:
            raise ConfigError(f"a setting is not a number: {error}") from None
        if idle <= 0 or not 0 < port < 65536:
            raise ConfigError("TONEARM_IDLE_LEAVE_SECONDS must be positive and the health port 1–65535")
        try:
            frames = int(environment.get("TONEARM_FRAMES_PER_MESSAGE", "1"))
        except ValueError:
            raise ConfigError("TONEARM_FRAMES_PER_MESSAGE is a whole number from 1 to 10") from None
        if not 1 <= frames <= 10:
            raise ConfigError("TONEARM_FRAMES_PER_MESSAGE is a whole number from 1 to 10")
        voice = environment.get("TONEARM_VOICE", "discord")
        if voice not in ("discord", "tonearm"):
            raise ConfigError(f"TONEARM_VOICE is 'discord' or 'tonearm', not {voice!r}")
        return Config(
            discord_token=environment["DISCORD_TOKEN"],
            bot_token=environment["TONEARM_BOT_TOKEN"],
            router_url=environment.get("TONEARM_ROUTER_URL", "http://127.0.0.1:8080"),
            idle_leave_seconds=idle,
            health_port=port,
            playground_url=environment.get("TONEARM_PUBLIC_URL") or None,
            voice=voice,
            frames_per_message=frames,
        )
