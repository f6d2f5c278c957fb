// Opus packets → WebCodecs AudioDecoder → Web Audio, through a small adaptive jitter buffer:
// playback starts once about 120 ms are scheduled; an underrun (a packet that arrives after its
// slot) restarts the buffer a little deeper (up to 300 ms); when packets pile up after a stall
// the oldest are skipped so the delay never grows, and what the pile left over the depth is
// skipped a frame a second; the depth shrinks again while all is well.
// It also keeps what a test or a curious user may ask: the last second heard, its dominant
// frequency and loudness, and the longest gap between packets. It needs WebCodecs, which browsers
// offer only in a secure context (HTTPS or localhost); `stream-player.js` plays elsewhere.
import { RATE, dominantFrequency, rms } from "/analysis.js";

const MIN_DEPTH = 0.08, START_DEPTH = 0.12, MAX_DEPTH = 0.3;
// More scheduled than the depth by this much for a second is delay a burst left, not jitter.
const EXCESS = 0.03;

export class Player {
  static get supported() {
    return typeof AudioDecoder !== "undefined" && typeof AudioContext !== "undefined";
  }

  constructor() {
    this.depth = START_DEPTH;
    this.playhead = 0;
    this.timestamp = 0;
    this.stats = { decoded: 0, underruns: 0, skipped: 0, lastArrival: 0, maxGapMs: 0 };
    this.recent = new Float32Array(2 * RATE); // what was scheduled last, ending at the playhead
    this.recentWrite = 0;
    this.calmSince = 0;
    this.excessSince = 0; // since when every packet found more than depth + EXCESS scheduled
    this.sources = new Set(); // scheduled and not yet ended
    this.heldUntil = 0; // after a pause press: packets still in flight are not played
  }

  /** Creates the AudioContext and decoder (call from a user gesture where autoplay is strict). */
  start() {
    this.heldUntil = 0;
    if (!this.context) this.context = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    if (this.context.state === "suspended") this.context.resume();
    if (!this.decoder || this.decoder.state === "closed") {
      this.decoder = new AudioDecoder({ output: (data) => this.schedule(data), error: () => (this.decoder = null) });
      this.decoder.configure({ codec: "opus", sampleRate: RATE, numberOfChannels: 2 });
    }
  }

  /** Any gesture on the page lets the AudioContext run. */
  unlock() { this.start(); }

  /** The session paused or stopped (here or elsewhere): what is scheduled is cut, not played out. */
  follow(playing) {
    if (playing) return;
    this.heldUntil = 0;
    this.cut();
  }

  /** The user pressed pause or stop: silent at once, and the packets the engine sent before it
   *  heard the command are not played (until the session says it paused, 2 s at most). */
  pause() {
    this.heldUntil = performance.now() + 2000;
    this.cut();
  }

  cut() {
    for (const source of this.sources) source.stop();
    this.sources.clear();
    this.playhead = 0;
    this.stats.lastArrival = 0;
  }

  get state() { return this.context ? this.context.state : "none"; }

  /** Seconds of audio scheduled ahead of what is being heard (the delay the buffer adds). */
  get lead() { return this.context ? Math.max(0, this.playhead - this.context.currentTime) : 0; }

  push(packet) {
    const now = performance.now();
    if (this.stats.lastArrival) this.stats.maxGapMs = Math.max(this.stats.maxGapMs, now - this.stats.lastArrival);
    this.stats.lastArrival = now;
    if (now < this.heldUntil) return;
    if (!this.decoder) this.start();
    if (this.decoder.state !== "configured") return;
    this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: this.timestamp, data: packet }));
    this.timestamp += 20000;
  }

  /** Nothing will arrive for a while (paused, stopped): the next packet starts a fresh buffer. */
  idle() { this.stats.lastArrival = 0; }

  schedule(data) {
    if (performance.now() < this.heldUntil) return data.close();
    const frames = data.numberOfFrames;
    const buffer = this.context.createBuffer(2, frames, RATE);
    const channel = new Float32Array(frames);
    let left;
    for (let c = 0; c < 2; c++) {
      data.copyTo(channel, { planeIndex: c, format: "f32-planar" });
      buffer.copyToChannel(channel, c);
      if (c === 0) left = channel.slice();
    }
    data.close();
    this.stats.decoded++;
    const now = this.context.currentTime;
    const ahead = this.playhead - now;
    if (this.playhead < now) {
      // Late: this is a start, or the network stalled. Restart deeper if it was an underrun.
      if (this.playhead > 0 && this.stats.lastArrival) {
        this.stats.underruns++;
        this.depth = Math.min(MAX_DEPTH, this.depth + 0.02);
      }
      this.playhead = now + this.depth;
      this.calmSince = now;
    } else if (ahead > this.depth + 0.1) {
      // A burst after a stall: skip this frame rather than keep the extra delay.
      this.stats.skipped++;
      return;
    } else if (ahead > this.depth + EXCESS) {
      // What a burst left over the depth: had every packet for a second found that much more
      // scheduled, one frame is skipped (20 ms less delay), and so each second until it is gone.
      this.excessSince ||= now;
      if (now - this.excessSince > 1) {
        this.excessSince = now;
        this.stats.skipped++;
        return;
      }
    } else {
      this.excessSince = 0;
      if (now - this.calmSince > 10 && this.depth > MIN_DEPTH) {
        this.depth = Math.max(MIN_DEPTH, this.depth - 0.005);
        this.calmSince = now;
      }
    }
    this.remember(left);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    source.onended = () => this.sources.delete(source);
    this.sources.add(source);
    source.start(this.playhead);
    this.playhead += buffer.duration;
  }

  remember(samples) {
    for (let i = 0; i < samples.length; i++) {
      this.recent[this.recentWrite] = samples[i];
      this.recentWrite = (this.recentWrite + 1) % this.recent.length;
    }
  }

  /** What was scheduled (left channel), oldest first, ending at the playhead. */
  history() {
    const out = new Float32Array(this.recent.length);
    out.set(this.recent.subarray(this.recentWrite));
    out.set(this.recent.subarray(0, this.recentWrite), this.recent.length - this.recentWrite);
    return out;
  }

  /** The last `seconds` (at most one) of what is heard now (left channel): the scheduled audio
   *  up to this moment, and silence from where the schedule ran out (paused, stopped, stalled). */
  samples(seconds) {
    const count = Math.round(RATE * Math.min(1, seconds));
    const out = new Float32Array(count);
    if (!this.context || this.playhead === 0) return out;
    const ahead = Math.round((this.playhead - this.context.currentTime) * RATE);
    const silent = Math.min(count, Math.max(0, -ahead));
    const all = this.history();
    const end = all.length - Math.max(0, ahead);
    const from = Math.max(0, end - (count - silent));
    if (end > from) out.set(all.subarray(from, end), count - silent - (end - from));
    return out;
  }

  /** Root mean square of the last `seconds` heard. */
  rms(seconds = 0.5) { return rms(this.samples(seconds)); }

  /** The strongest frequency (Hz) of the last half second heard. */
  dominantFrequency() { return dominantFrequency(this.samples(0.5)); }
}
