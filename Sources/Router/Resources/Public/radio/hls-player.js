// A small HLS player for the Router's `/hls/{id}/index.m3u8` (docs/router-api.md): it reads the live
// playlist every target duration, appends `init.mp4` and each new fMP4 segment (Opus) to Media
// Source, and turns each `EXT-X-DATERANGE` of class `com.tonearm.track` into a title at the moment
// of the stream it names, so the page shows a track's title when that track is heard.
//
// Where Media Source cannot take Opus in MP4, the element plays the playlist itself (the browser's
// own HLS, if it has one); titles then follow `getStartDate()`, which maps the element's time to the
// playlist's program-date clock, where the browser offers it, else the newest title read.
import { ElementMeter } from "/analysis.js";

export const MP4_OPUS = 'audio/mp4; codecs="opus"';
const TRACK_CLASS = "com.tonearm.track";
/** Segments appended at the start: about 4–6 s behind the newest, as far as the spec asks. */
const START_SEGMENTS = 3;
const KEEP_BEHIND = 30;
/** Seconds buffered before the first sound. */
const LEAD = 4;

/** The parts of a media playlist this player uses. */
export function parsePlaylist(text, base) {
  const playlist = { sequence: 0, target: 2, map: null, segments: [], ranges: [], ended: false };
  let programDate = null, duration = 0, discontinuity = false;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    if (line.startsWith("#EXT-X-MEDIA-SEQUENCE:")) playlist.sequence = Number(line.slice(22)) || 0;
    else if (line.startsWith("#EXT-X-TARGETDURATION:")) playlist.target = Number(line.slice(22)) || 2;
    else if (line.startsWith("#EXT-X-MAP:")) playlist.map = new URL(attributes(line.slice(11)).URI, base).href;
    else if (line.startsWith("#EXT-X-PROGRAM-DATE-TIME:")) programDate = Date.parse(line.slice(25));
    else if (line.startsWith("#EXTINF:")) duration = parseFloat(line.slice(8)) || 0;
    else if (line === "#EXT-X-DISCONTINUITY") discontinuity = true;
    else if (line === "#EXT-X-ENDLIST") playlist.ended = true;
    else if (line.startsWith("#EXT-X-DATERANGE:")) {
      const a = attributes(line.slice(17));
      const start = Date.parse(a["START-DATE"]);
      if (a.CLASS === TRACK_CLASS && !Number.isNaN(start)) {
        playlist.ranges.push({ id: a.ID, start, title: a["X-TITLE"] ?? "", artist: a["X-ARTIST"] ?? "" });
      }
    } else if (!line.startsWith("#")) {
      playlist.segments.push({
        sequence: playlist.sequence + playlist.segments.length, url: new URL(line, base).href,
        duration, programDate, discontinuity,
      });
      programDate = programDate === null ? null : programDate + duration * 1000;
      duration = 0;
      discontinuity = false;
    }
  }
  return playlist;
}

/** `KEY=value,KEY="quoted, value"` → {KEY: value}. */
function attributes(list) {
  const out = {};
  for (const match of list.matchAll(/([A-Z0-9-]+)=("([^"]*)"|[^,]*)/g)) out[match[1]] = match[3] ?? match[2];
  return out;
}

export class HLSPlayer extends ElementMeter {
  /** Media Source with Opus in MP4, or the element's own HLS, or neither. */
  static mode(audio) {
    if (typeof MediaSource !== "undefined" && MediaSource.isTypeSupported(MP4_OPUS)) return "mse";
    if (audio.canPlayType("application/vnd.apple.mpegurl")) return "native";
    return null;
  }

  /** `onchange` is called with the player whenever what it shows (title, state) changes. */
  constructor(audio, playlistURL, { mode = HLSPlayer.mode(audio), onchange = () => {} } = {}) {
    super(audio);
    Object.assign(this, { playlistURL, mode, onchange });
    this.state = "idle"; // idle, loading, live, paused (the session is silent), ended, error
    this.error = "";
    this.titles = []; // {media, start, title, artist}: media is the element's time, when known
    this.seen = new Set();
    this.shown = null;
    this.appended = []; // {sequence, media, duration, programDate}: the newest 100 segments
    this.queue = [];
    this.lastSequence = -1;
    this.stats = { segments: 0, skipped: 0, underruns: 0 };
    audio.addEventListener("playing", () => { this.playing = true; });
    audio.addEventListener("waiting", () => { if (this.playing) this.stats.underruns++; });
    audio.addEventListener("timeupdate", () => this.showTitle());
  }

  /** Call from the click that asked for audio: sets up the output and starts reading. */
  start() {
    this.openOutput();
    if (this.state !== "idle") {
      // Resuming: back near the live edge rather than where the listener stopped.
      const ranges = this.buffer?.buffered;
      if (ranges?.length && ranges.end(ranges.length - 1) - this.audio.currentTime > 3 * START_SEGMENTS) {
        this.audio.currentTime = ranges.end(ranges.length - 1) - 2 * START_SEGMENTS;
      }
      return this.audio.play().catch(() => {});
    }
    this.set("loading");
    if (this.mode === "mse") {
      this.source = new MediaSource();
      this.source.addEventListener("sourceopen", () => {
        this.buffer = this.source.addSourceBuffer(MP4_OPUS);
        // Appended back to back: a pause in the session leaves no hole to stall on.
        this.buffer.mode = "sequence";
        this.buffer.addEventListener("updateend", () => { this.begin(); this.flush(); });
        this.poll();
      }, { once: true });
      this.audio.src = URL.createObjectURL(this.source);
    } else {
      this.audio.src = this.playlistURL;
      this.poll();
    }
    // Media Source: the element starts in begin(), once enough is buffered.
    if (this.mode !== "mse") this.audio.play().catch(() => {});
  }

  async poll() {
    let next = 2000;
    try {
      const response = await fetch(this.playlistURL, { cache: "no-store" });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        throw new Error(body.error?.message ?? `the playlist answered ${response.status}`);
      }
      const playlist = parsePlaylist(await response.text(), response.url);
      next = playlist.target * 1000;
      this.read(playlist);
    } catch (error) {
      this.error = String(error.message ?? error);
      this.set("error");
      next = 5000;
    }
    this.timer = setTimeout(() => this.poll(), next);
  }

  read(playlist) {
    for (const range of playlist.ranges) {
      if (this.seen.has(range.id)) continue;
      this.seen.add(range.id);
      this.titles.push({ ...range, media: null });
    }
    if (this.mode === "mse") {
      if (!this.initAppended && playlist.map) {
        this.initAppended = true;
        this.queue.push({ url: playlist.map });
      }
      let segments = playlist.segments.filter((s) => s.sequence > this.lastSequence);
      if (this.lastSequence < 0) segments = segments.slice(-START_SEGMENTS);
      else if (segments.length && segments[0].sequence > this.lastSequence + 1) {
        this.stats.skipped += segments[0].sequence - this.lastSequence - 1;
      }
      for (const segment of segments) this.queue.push(segment);
      if (segments.length) this.lastSequence = segments[segments.length - 1].sequence;
      this.flush();
    }
    // No new segment for two target durations: the session is silent (paused, or between plays).
    const newest = playlist.segments.length ? playlist.segments[playlist.segments.length - 1].sequence : -1;
    if (newest !== this.newest) Object.assign(this, { newest, newestAt: performance.now() });
    const silent = performance.now() - this.newestAt > 2000 * playlist.target + 500;
    this.set(playlist.ended ? "ended" : silent ? "paused" : "live");
    if (this.buffer) this.begin();
    this.showTitle();
  }

  /** Trims, or fetches and appends the next queued part, when the buffer is free. */
  async flush() {
    if (!this.buffer || this.buffer.updating || this.fetching) return;
    // What was heard more than KEEP_BEHIND seconds ago goes first (its updateend flushes again).
    const behind = this.audio.currentTime - KEEP_BEHIND;
    const ranges = this.buffer.buffered;
    if (behind > 0 && ranges.length && ranges.start(0) < behind - 1) {
      try { return this.buffer.remove(0, behind); } catch { /* the next flush tries again */ }
    }
    if (!this.queue.length) return;
    const part = this.queue.shift();
    this.fetching = true;
    let bytes;
    try {
      const response = await fetch(part.url);
      if (!response.ok) throw new Error(`${response.status}`);
      bytes = await response.arrayBuffer();
    } catch {
      // A segment gone from the window (or a network error): the next ones still play.
      this.stats.skipped++;
      this.fetching = false;
      return this.flush();
    }
    this.fetching = false;
    if (part.sequence !== undefined) {
      const now = this.buffer.buffered;
      const media = now.length ? now.end(now.length - 1) : 0;
      this.appended.push({ sequence: part.sequence, media, duration: part.duration, programDate: part.programDate });
      if (this.appended.length > 100) this.appended.shift();
      this.stats.segments++;
    }
    try {
      this.buffer.appendBuffer(bytes);
    } catch (error) {
      this.error = String(error.message ?? error);
      this.set("error");
    }
  }

  /** Starts the element once LEAD seconds are buffered (a segmenter that has just started
   *  has one segment, and playing at its edge would stall at every segment), or at the end. */
  begin() {
    const ranges = this.buffer.buffered;
    if (this.begun || !ranges.length) return;
    if (ranges.end(ranges.length - 1) - ranges.start(0) < LEAD && this.state !== "ended") return;
    this.begun = true;
    this.audio.currentTime = ranges.start(0);
    this.audio.play().catch(() => {});
  }

  /** Gives each title the element time its START-DATE falls at, from the appended segments (a
   *  title from before them, or in a segment skipped, starts with the next segment heard). */
  place() {
    for (const entry of this.titles) {
      if (entry.media !== null) continue;
      const segment = this.appended.find((s) => s.programDate !== null && entry.start < s.programDate + s.duration * 1000);
      if (segment) entry.media = segment.media + Math.max(0, entry.start - segment.programDate) / 1000;
    }
  }

  /** The title of what the element plays now. */
  showTitle() {
    if (this.mode === "mse") this.place();
    let now = null;
    if (this.mode === "mse") {
      const at = this.audio.currentTime;
      for (const entry of this.titles) if (entry.media !== null && entry.media <= at + 0.01) now = entry;
    } else {
      const start = typeof this.audio.getStartDate === "function" ? this.audio.getStartDate().getTime() : NaN;
      const at = Number.isNaN(start) ? Infinity : start + this.audio.currentTime * 1000;
      for (const entry of this.titles) if (entry.start <= at) now = entry;
    }
    if (now && now !== this.shown) {
      this.shown = now;
      this.onchange(this);
    }
  }

  set(state) {
    if (state === this.state) return;
    this.state = state;
    if (state !== "error") this.error = "";
    this.onchange(this);
  }

  get title() { return this.shown?.title ?? ""; }
  get artist() { return this.shown?.artist ?? ""; }
}
