// The player for pages without WebCodecs (plain HTTP on a host name is not a secure context):
// the same Opus packets from the session's WebSocket, wrapped in WebM (`webm.js`) and played by an
// <audio> element through Media Source Extensions, which browsers allow on any origin. The element
// is kept near the live edge: once more than `depth` + 150 ms is buffered ahead of what is heard,
// it jumps forward, so a control is heard about as soon as on the WebCodecs path (figures in
// docs/architecture.md). `start()` must run inside the user's gesture (a click on the page's own
// buttons): that is what lets the element play.
import { ElementMeter } from "/analysis.js";
import { WEBM_OPUS, cluster, concat, initSegment } from "/webm.js";

const DEPTH = 0.15, SLACK = 0.15, KEEP_BEHIND = 10;

export class StreamPlayer extends ElementMeter {
  static get supported() {
    return typeof MediaSource !== "undefined" && MediaSource.isTypeSupported(WEBM_OPUS);
  }

  constructor(audio) {
    super(audio);
    this.depth = DEPTH;
    this.stats = { decoded: 0, underruns: 0, skipped: 0, lastArrival: 0, maxGapMs: 0 };
    this.pending = [initSegment()];
    this.packets = [];
    this.timeMs = 0;
    this.wanted = false;
    this.source = new MediaSource();
    this.source.addEventListener("sourceopen", () => {
      this.buffer = this.source.addSourceBuffer(WEBM_OPUS);
      // Packets are appended back to back whatever their timestamps, so a pause leaves no hole.
      this.buffer.mode = "sequence";
      this.buffer.addEventListener("updateend", () => this.flush());
      this.flush();
    }, { once: true });
    audio.src = URL.createObjectURL(this.source);
    audio.addEventListener("waiting", () => { if (this.stats.decoded) this.stats.underruns++; });
  }

  /** Starts (or resumes) the element; call from the click that asked for audio. */
  start() {
    this.wanted = true;
    this.unlock();
  }

  /** Any gesture on the page: set up the output, and play if the session is playing. */
  unlock() {
    this.openOutput();
    if (!this.wanted) return;
    this.catchUp();
    this.audio.play().catch(() => {});
  }

  /** The session's state changed, whoever changed it (this tab, another, a bot, the queue). */
  follow(playing) {
    if (playing && !this.wanted) {
      this.wanted = true;
      this.catchUp();
      this.audio.play().catch(() => {});
    } else if (!playing && this.wanted) {
      this.pause();
    }
  }

  /** The user paused or stopped: the element stops at once instead of playing out its buffer. */
  pause() {
    this.wanted = false;
    this.audio.pause();
  }

  get state() { return this.context ? this.context.state : "none"; }

  /** Seconds buffered ahead of what is heard. */
  get lead() {
    const buffered = this.buffer?.buffered;
    if (!buffered || buffered.length === 0) return 0;
    return Math.max(0, buffered.end(buffered.length - 1) - this.audio.currentTime);
  }

  push(packet) {
    const now = performance.now();
    if (this.stats.lastArrival) this.stats.maxGapMs = Math.max(this.stats.maxGapMs, now - this.stats.lastArrival);
    this.stats.lastArrival = now;
    this.packets.push(new Uint8Array(packet));
    this.stats.decoded++;
    // Audio arriving means the session plays (another tab or a bot may have pressed play): follow
    // it, as far as the browser allows without a new gesture.
    if (this.wanted && this.audio.paused) this.audio.play().catch(() => {});
    this.flush();
  }

  idle() { this.stats.lastArrival = 0; }

  flush() {
    if (!this.buffer || this.buffer.updating) return;
    if (this.packets.length) {
      this.pending.push(cluster(this.packets, this.timeMs));
      this.timeMs += this.packets.length * 20;
      this.packets = [];
    }
    if (this.pending.length === 0) return this.trim();
    const bytes = this.pending.length === 1 ? this.pending[0] : concat(this.pending);
    this.pending = [];
    try {
      this.buffer.appendBuffer(bytes);
    } catch {
      // The buffer is full (a tab that stayed in the background): start over from the live edge.
      this.buffer.abort();
    }
    this.catchUp();
  }

  /** Keeps the element near the newest audio: a backlog is skipped, never played late. */
  catchUp() {
    const buffered = this.buffer?.buffered;
    if (!buffered || buffered.length === 0) return;
    const end = buffered.end(buffered.length - 1);
    if (end - this.audio.currentTime > this.depth + SLACK) {
      this.audio.currentTime = Math.max(buffered.start(buffered.length - 1), end - this.depth);
      this.stats.skipped++;
    }
  }

  /** Drops audio long heard, so an endless stream does not fill the element's memory. */
  trim() {
    const buffered = this.buffer.buffered;
    if (buffered.length && this.audio.currentTime - buffered.start(0) > 2 * KEEP_BEHIND) {
      this.buffer.remove(0, this.audio.currentTime - KEEP_BEHIND);
    }
  }

}


/** The last resort, for browsers without Opus in Media Source: the session's Ogg stream
 *  (`/listen/{id}.ogg`), reloaded at the live edge whenever playback (re)starts. Its output is
 *  measured as the other players' is (what tests hear). */
export class ListenPlayer extends ElementMeter {
  constructor(audio, url) {
    super(audio);
    Object.assign(this, { url, wanted: false });
    this.stats = { decoded: 0, underruns: 0, skipped: 0, lastArrival: 0, maxGapMs: 0 };
    this.depth = 0;
  }

  start() {
    this.wanted = true;
    this.openOutput();
    this.audio.src = `${this.url}&at=${Date.now()}`;
    this.audio.play().catch(() => {});
  }

  unlock() {
    this.openOutput();
    if (this.wanted && this.audio.paused) this.start();
  }

  follow(playing) {
    if (playing && !this.wanted) this.start();
    else if (!playing && this.wanted) this.pause();
  }

  pause() {
    this.wanted = false;
    this.audio.pause();
  }

  get state() { return this.context?.state ?? "none"; }
  get lead() { return 0; }
  push() {}
  idle() {}
}
