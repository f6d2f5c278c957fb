"""The bot's settings and its slash commands as discord.py registers them (no Discord needed)."""

import pytest

from tonearm_discord.bot import TonearmBot
from tonearm_discord.config import Config, ConfigError


def test_missing_settings_are_named():
    with pytest.raises(ConfigError, match="DISCORD_TOKEN and TONEARM_BOT_TOKEN"):
        Config.from_environment({})
    with pytest.raises(ConfigError, match="not a number"):
        Config.from_environment({"DISCORD_TOKEN": "a", "TONEARM_BOT_TOKEN": "b", "TONEARM_IDLE_LEAVE_SECONDS": "soon"})
    with pytest.raises(ConfigError, match="TONEARM_VOICE is 'discord' or 'tonearm'"):
        Config.from_environment({"DISCORD_TOKEN": "a", "TONEARM_BOT_TOKEN": "b", "TONEARM_VOICE": "lavalink"})
    config = Config.from_environment({"DISCORD_TOKEN": "a", "TONEARM_BOT_TOKEN": "b"})
    assert config.router_url == "http://127.0.0.1:8080" and config.idle_leave_seconds == 300
    assert config.voice == "discord"
    assert Config.from_environment({"DISCORD_TOKEN": "a", "TONEARM_BOT_TOKEN": "b", "TONEARM_VOICE": "tonearm"}).voice == "tonearm"
    assert config.frames_per_message == 1
    assert Config.from_environment({"DISCORD_TOKEN": "a", "TONEARM_BOT_TOKEN": "b", "TONEARM_FRAMES_PER_MESSAGE": "3"}).frames_per_message == 3
    for bad in ("0", "11", "three"):
        with pytest.raises(ConfigError, match="TONEARM_FRAMES_PER_MESSAGE is a whole number from 1 to 10"):
            Config.from_environment({"DISCORD_TOKEN": "a", "TONEARM_BOT_TOKEN": "b", "TONEARM_FRAMES_PER_MESSAGE": bad})


def test_every_slash_command_is_registered_with_its_options():
    bot = TonearmBot(Config(discord_token="a", bot_token="b"))
    commands = {command.name: command for command in bot.tree.get_commands()}
    assert set(commands) == {
        "play", "queue", "skip", "previous", "pause", "resume", "stop", "shuffle", "seek", "volume", "loop",
        "remove", "nowplaying", "leave", "equalizer", "effect", "normalize", "crossfade", "over", "cue", "radio",
        "follow", "unfollow",
    }
    assert [p.name for p in commands["play"].parameters] == ["query"]
    assert [p.name for p in commands["skip"].parameters] == []
    volume = commands["volume"].parameters[0]
    assert (volume.min_value, volume.max_value) == (0, 1000)
    assert [c.value for c in commands["loop"].parameters[0].choices] == ["off", "track", "queue"]
    assert "bass boost" in [c.value for c in commands["equalizer"].parameters[0].choices]
    assert "8D" in [c.value for c in commands["effect"].parameters[0].choices]
    assert [p.name for p in commands["normalize"].parameters] == ["on"]
    assert [p.name for p in commands["cue"].parameters] == ["on"]
    over = commands["over"].parameters
    assert [p.name for p in over] == ["query", "volume"] and not over[1].required
    assert (over[1].min_value, over[1].max_value) == (0, 1000)
    crossfade = commands["crossfade"].parameters[0]
    assert (crossfade.name, crossfade.min_value, crossfade.max_value) == ("seconds", 0, 12)
