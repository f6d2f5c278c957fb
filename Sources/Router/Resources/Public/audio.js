// Opus packets → WebCodecs AudioDecoder → Web Audio, through a small adaptive jitter buffer:
// playback starts once about 120 ms are scheduled; an underrun (a packet that arrives after its
// slot) restarts the buffer a little deeper (up to 300 ms); when packets pile up after a stall
// the oldest are skipped so the delay never grows; the depth shrinks again while all is well.
// It also keeps what a test or a curious user may ask: the last second decoded, its dominant
// frequency and loudness, and the longest gap between packets.

const RATE = 48000;
const MIN_DEPTH = 0.08, START_DEPTH = 0.12, MAX_DEPTH = 0.3;

export class Player {
  static get supported() {
    return typeof AudioDecoder !== "undefined" && typeof AudioContext !== "undefined";
  }

  constructor() {
    this.depth = START_DEPTH;
    this.playhead = 0;
    this.timestamp = 0;
    this.stats = { decoded: 0, underruns: 0, skipped: 0, lastArrival: 0, maxGapMs: 0 };
    this.recent = new Float32Array(RATE);
    this.recentWrite = 0;
    this.calmSince = 0;
  }

  /** Creates the AudioContext and decoder (call from a user gesture where autoplay is strict). */
  start() {
    if (!this.context) this.context = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    if (this.context.state === "suspended") this.context.resume();
    if (!this.decoder || this.decoder.state === "closed") {
      this.decoder = new AudioDecoder({ output: (data) => this.schedule(data), error: () => (this.decoder = null) });
      this.decoder.configure({ codec: "opus", sampleRate: RATE, numberOfChannels: 2 });
    }
  }

  get state() { return this.context ? this.context.state : "none"; }

  /** Seconds of audio scheduled ahead of what is being heard (the delay the buffer adds). */
  get lead() { return this.context ? Math.max(0, this.playhead - this.context.currentTime) : 0; }

  push(packet) {
    const now = performance.now();
    if (this.stats.lastArrival) this.stats.maxGapMs = Math.max(this.stats.maxGapMs, now - this.stats.lastArrival);
    this.stats.lastArrival = now;
    if (!this.decoder) this.start();
    if (this.decoder.state !== "configured") return;
    this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: this.timestamp, data: packet }));
    this.timestamp += 20000;
  }

  /** Nothing will arrive for a while (paused, stopped): the next packet starts a fresh buffer. */
  idle() { this.stats.lastArrival = 0; }

  schedule(data) {
    const frames = data.numberOfFrames;
    const buffer = this.context.createBuffer(2, frames, RATE);
    const channel = new Float32Array(frames);
    for (let c = 0; c < 2; c++) {
      data.copyTo(channel, { planeIndex: c, format: "f32-planar" });
      buffer.copyToChannel(channel, c);
      if (c === 0) this.remember(channel);
    }
    data.close();
    this.stats.decoded++;
    const now = this.context.currentTime;
    if (this.playhead < now) {
      // Late: this is a start, or the network stalled. Restart deeper if it was an underrun.
      if (this.playhead > 0 && this.stats.lastArrival) {
        this.stats.underruns++;
        this.depth = Math.min(MAX_DEPTH, this.depth + 0.02);
      }
      this.playhead = now + this.depth;
      this.calmSince = now;
    } else if (this.playhead - now > this.depth + 0.1) {
      // A burst after a stall: skip this frame rather than keep the extra delay.
      this.stats.skipped++;
      return;
    } else if (now - this.calmSince > 10 && this.depth > MIN_DEPTH) {
      this.depth = Math.max(MIN_DEPTH, this.depth - 0.005);
      this.calmSince = now;
    }
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    source.start(this.playhead);
    this.playhead += buffer.duration;
  }

  remember(samples) {
    for (let i = 0; i < samples.length; i++) {
      this.recent[this.recentWrite] = samples[i];
      this.recentWrite = (this.recentWrite + 1) % this.recent.length;
    }
  }

  /** The last second decoded (left channel), oldest first. */
  lastSecond() {
    const out = new Float32Array(this.recent.length);
    out.set(this.recent.subarray(this.recentWrite));
    out.set(this.recent.subarray(0, this.recentWrite), this.recent.length - this.recentWrite);
    return out;
  }

  /** Root mean square of the last `seconds` decoded. */
  rms(seconds = 0.5) {
    const samples = this.lastSecond().subarray(RATE - Math.round(RATE * seconds));
    let sum = 0;
    for (const s of samples) sum += s * s;
    return Math.sqrt(sum / samples.length);
  }

  /** The strongest frequency (Hz, 2 Hz steps, 50–4000 Hz) of the last half second (Goertzel). */
  dominantFrequency() {
    const samples = this.lastSecond().subarray(RATE / 2);
    let best = 0, bestPower = 0;
    for (let f = 50; f <= 4000; f += 2) {
      const k = 2 * Math.cos((2 * Math.PI * f) / RATE);
      let s1 = 0, s2 = 0;
      for (let i = 0; i < samples.length; i++) {
        const s0 = samples[i] + k * s1 - s2;
        s2 = s1;
        s1 = s0;
      }
      const power = s1 * s1 + s2 * s2 - k * s1 * s2;
      if (power > bestPower) { bestPower = power; best = f; }
    }
    return best;
  }
}
