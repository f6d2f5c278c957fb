"""What each slash command does, apart from Discord: plain async functions over a guild's
``GuildLink`` (commands on the bot WebSocket, docs/bot-protocol.md) and the Router's REST search.
Each answers the sentence the bot shows; a refusal raises ``TonearmError`` with the Router's
own message, which the bot shows as it is."""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import quote

import aiohttp

from .router_link import GuildLink, TonearmError
from .waits import ExternalWait, direct

LOOP_MODES = ("off", "track", "queue")

# Equalizer presets in Lavalink's shape (band 0 = 25 Hz … 14 = 16 kHz; a gain g multiplies the
# band by 1 + 4g, so 0.25 is +6 dB). The engine applies them from its next frame: no seek needed.
EQUALIZER_PRESETS: dict[str, list[dict[str, float]]] = {
    "flat": [],
    "bass boost": [{"band": b, "gain": g} for b, g in enumerate((0.25, 0.2, 0.15, 0.1, 0.05))],
    "treble boost": [{"band": b, "gain": g} for b, g in zip(range(10, 15), (0.05, 0.1, 0.15, 0.2, 0.2))],
    "vocals": [{"band": b, "gain": g} for b, g in ((0, -0.05), (1, -0.05), (7, 0.1), (8, 0.15), (9, 0.15), (10, 0.1))],
    "soft": [{"band": b, "gain": g} for b, g in zip(range(10, 15), (-0.05, -0.1, -0.1, -0.15, -0.15))],
}

# The other Lavalink filters, one preset each (docs/engine-api.md#filters). An effect and an
# equalizer preset combine: setting one keeps the other.
EFFECT_PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "8D": {"rotation": {"rotationHz": 0.2}},
    "karaoke": {"karaoke": {"level": 1.0, "monoLevel": 1.0, "filterBand": 220.0, "filterWidth": 100.0}},
    "tremolo": {"tremolo": {"frequency": 4.0, "depth": 0.5}},
    "vibrato": {"vibrato": {"frequency": 4.0, "depth": 0.5}},
    "muffled": {"lowPass": {"smoothing": 20.0}},
    "mono": {"channelMix": {"leftToLeft": 0.5, "leftToRight": 0.5, "rightToLeft": 0.5, "rightToRight": 0.5}},
    "nightcore": {"timescale": {"speed": 1.0, "pitch": 1.0, "rate": 1.25}},
    "vaporwave": {"timescale": {"speed": 1.0, "pitch": 1.0, "rate": 0.8}},
    "faster": {"timescale": {"speed": 1.5, "pitch": 1.0, "rate": 1.0}},
}


def looks_like_a_link(text: str) -> bool:
    """A URL, or a file name of the engine's media directory, rather than search words."""
    text = text.strip()
    return "://" in text or ("." in text and " " not in text)


def clock(ms: Optional[int]) -> str:
    if ms is None or ms < 0:
        return "live"
    seconds = ms // 1000
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def parse_clock(text: str) -> int:
    """ "90", "1:30" or "1:02:03" → milliseconds; ValueError otherwise."""
    parts = text.strip().split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a time: give seconds (90) or minutes:seconds (1:30)")
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds * 1000


def track_name(track: Optional[dict[str, Any]]) -> str:
    if not track:
        return "nothing"
    return str(track.get("title") or track.get("url") or "an untitled track")


class Commands:
    def __init__(
        self, link: GuildLink, http: aiohttp.ClientSession, router_url: str, token: str, *, wait: ExternalWait = direct
    ) -> None:
        self.link = link
        self.http = http
        self.router_url = router_url.rstrip("/")
        self.token = token
        self.wait = wait

    async def search(self, words: str) -> dict[str, Any]:
        """The first result for `words` (the Router's `/api/search`)."""
        url = f"{self.router_url}/api/search?q={quote(words)}&limit=1"
        status, body = await self.wait(self._get(url), reason="Tonearm's /api/search")
        if status != 200:
            error = (body or {}).get("error") or {}
            raise TonearmError(str(error.get("code", status)), str(error.get("message", "search failed")))
        results = body.get("results") or []
        if not results:
            raise TonearmError("no_results", f"nothing found for “{words}”")
        return results[0]

    async def _get(self, url: str) -> tuple[int, Any]:
        async with self.http.get(url, headers={"Authorization": f"Bearer {self.token}"}) as response:
            return response.status, await response.json(content_type=None)

    async def radio(self, public_url: Optional[str]) -> str:
        """`/radio`: a link for listeners outside Discord, any number of them (the Router's
        `/radio/` page, HLS): its listen token hears this guild's music and controls nothing."""
        if not public_url:
            raise TonearmError(
                "no_public_url", "the operator has not set TONEARM_PUBLIC_URL, so I know no address listeners could reach")
        url = f"{self.router_url}/api/sessions/{quote(self.link.guild_id, safe='')}/listen-token"
        status, body = await self.wait(self._post(url), reason="Tonearm's listen-token")
        if status != 200:
            error = (body or {}).get("error") or {}
            raise TonearmError(str(error.get("code", status)), str(error.get("message", "no listeners' link")))
        return (f"Listen in a browser, outside Discord, with anyone you give this link: "
                f"{public_url.rstrip('/')}{body['page']} (it hears this server's music and controls nothing)")

    async def _post(self, url: str) -> tuple[int, Any]:
        async with self.http.post(url, headers={"Authorization": f"Bearer {self.token}"}) as response:
            return response.status, await response.json(content_type=None)

    async def _link(self, query: str) -> tuple[str, str, Optional[dict[str, Any]]]:
        """What a user typed as a URL: a link as it is, words as their first search result; with
        the name to say and the search result, if any."""
        url = query.strip()
        if looks_like_a_link(url):
            return url, url, None
        found = await self.search(url)
        return str(found["url"]), track_name(found), found

    async def play(self, query: str, now: bool = False) -> str:
        """`/play`: a link is played as it is; words are searched first. Appends unless `now`."""
        url, name, found = await self._link(query)
        try:
            state = await self.link.command("play" if now else "queue", url=url)
        except TonearmError as error:
            if found is None:
                raise
            # Say what the words found, so the user knows what was refused.
            raise TonearmError(error.code, f"found **{name}**, but {error.message}") from None
        if any(entry.get("url") == url for entry in state.get("resolving") or []):
            # A slow link is answered at once and looked up in the background: the guild's state
            # shows it when found; a failure is an `error` event naming the link.
            return f"Looking up **{name}**… it {'plays' if now else 'joins the queue'} as soon as it is found."
        queue = state.get("queue") or []
        # Queued on an idle guild, the track starts at once: it is then the current one.
        started = now or (state.get("current") == len(queue) - 1 and state.get("status") != "idle")
        return f"Playing **{name}**" if started else f"Queued **{name}** (position {len(queue)})"

    async def over(self, query: str, volume: int = 100) -> str:
        """`/over`: a sound over the music (a layer), which ducks under it and comes back after."""
        url, name, _ = await self._link(query)
        await self.link.request("layer", url=url, volume=volume)
        return f"Playing **{name}** over the music."

    async def queue(self) -> str:
        state = await self.link.command("state")
        tracks = state.get("queue") or []
        if not tracks:
            return "The queue is empty."
        current = state.get("current")
        lines = []
        for index, track in enumerate(tracks[:20]):
            marker = "▶" if index == current else f"{index + 1}."
            lines.append(f"{marker} {track_name(track)} ({clock(track.get('duration_ms'))})")
        if len(tracks) > 20:
            lines.append(f"… and {len(tracks) - 20} more")
        return "\n".join(lines)

    async def simple(self, op: str) -> str:
        """skip, previous, pause, resume, stop, shuffle."""
        command = {"skip": "next"}.get(op, op)
        state = await self.link.command(command)
        return {
            "skip": f"Skipped to **{track_name(state.get('now_playing'))}**",
            "previous": f"Back to **{track_name(state.get('now_playing'))}**",
            "pause": "Paused.",
            "resume": "Resumed.",
            "stop": "Stopped.",
            "shuffle": "Shuffled what is coming up.",
        }[op]

    async def seek(self, position: str) -> str:
        try:
            ms = parse_clock(position)
        except ValueError as error:
            raise TonearmError("invalid_position", str(error)) from None
        await self.link.command("seek", position_ms=ms)
        return f"Moved to {clock(ms)}."

    async def volume(self, percent: int) -> str:
        await self.link.command("volume", volume=percent)
        return f"Volume {percent} %."

    async def equalizer(self, preset: str) -> str:
        bands = EQUALIZER_PRESETS.get(preset)
        if bands is None:
            raise TonearmError("invalid_preset", f"the presets are {', '.join(EQUALIZER_PRESETS)}")
        filters = dict((await self.link.command("state")).get("filters") or {})
        filters["equalizer"] = bands
        await self.link.command("filters", **filters)
        return "Equalizer off." if not bands else f"Equalizer: {preset}."

    async def effect(self, preset: str) -> str:
        effect = EFFECT_PRESETS.get(preset)
        if effect is None:
            raise TonearmError("invalid_preset", f"the effects are {', '.join(EFFECT_PRESETS)}")
        equalizer = ((await self.link.command("state")).get("filters") or {}).get("equalizer") or []
        await self.link.command("filters", equalizer=equalizer, **effect)
        return "Effect off." if not effect else f"Effect: {preset}."

    async def normalize(self, on: bool) -> str:
        await self.link.command("normalize", enabled=on)
        return "Every track at the same loudness." if on else "Tracks at their own loudness."

    async def cue(self, on: bool) -> str:
        await self.link.command("cue", enabled=on)
        return ("Tracks join where the music ends and begins, without the silence between them." if on
                else "Tracks play to their very ends.")

    async def crossfade(self, seconds: float) -> str:
        """0 joins each track to the next on the sample; up to 12 s fades one into the other."""
        if not 0 <= seconds <= 12:
            raise TonearmError("invalid_crossfade", "a crossfade is from 0 to 12 seconds")
        await self.link.command("crossfade", crossfade_ms=round(seconds * 1000))
        if seconds == 0:
            return "Crossfade off: each track starts on the sample the last one ends."
        return f"Each track fades into the next over {seconds:g} s."

    async def follow(self, station: str) -> str:
        """This guild hears another session (a station other servers hear too) instead of its queue."""
        station = station.strip()
        if not station:
            raise TonearmError("missing_station", "name the station to follow")
        await self.link.command("follow", station=station)
        return f"Following **{station}**: this server hears it with everyone who follows it. /unfollow plays your own music again."

    async def unfollow(self) -> str:
        await self.link.command("unfollow")
        return "Stopped following. Your queue is as you left it: /resume or /play."

    async def loop(self, mode: str) -> str:
        if mode not in LOOP_MODES:
            raise TonearmError("invalid_mode", "loop is off, track or queue")
        await self.link.command("loop", mode=mode)
        return {"off": "Looping off.", "track": "Looping this track.", "queue": "Looping the queue."}[mode]

    async def remove(self, position: int) -> str:
        """`position` counts from 1, as `/queue` shows it."""
        state = await self.link.command("state")
        tracks = state.get("queue") or []
        if not 1 <= position <= len(tracks):
            raise TonearmError("invalid_index", f"there is no position {position}: the queue has {len(tracks)}")
        await self.link.command("remove", index=position - 1)
        return f"Removed **{track_name(tracks[position - 1])}**."

    async def now_playing(self) -> dict[str, Any]:
        """Title, position and duration, for an embed."""
        state = await self.link.command("state")
        track = state.get("now_playing")
        return {
            "title": track_name(track),
            "url": (track or {}).get("url"),
            "status": state.get("status", "idle"),
            "position": clock(state.get("position_ms")),
            "duration": clock(state.get("duration_ms")),
            "volume": state.get("volume", 100),
            "loop": state.get("loop", "off"),
        }
