// What the page can tell about the audio it plays, for tests and the curious: loudness and the
// strongest frequency of a window of samples (48 kHz, one channel).

export const RATE = 48000;

/** Root mean square of `samples`. */
export function rms(samples) {
  let sum = 0;
  for (const s of samples) sum += s * s;
  return samples.length ? Math.sqrt(sum / samples.length) : 0;
}

/** The strongest frequency (Hz, 2 Hz steps, 50–4000 Hz) in `samples` (Goertzel). */
export function dominantFrequency(samples) {
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

/** A media element whose output goes through Web Audio to an analyser, so the page can measure
 *  what is heard. The players built on an element (`stream-player.js`, `radio/hls-player.js`)
 *  extend it. */
export class ElementMeter {
  constructor(audio) {
    this.audio = audio;
  }

  /** Makes (or resumes) the element's audio output; call from a gesture. */
  openOutput() {
    if (!this.context) {
      this.context = new AudioContext({ sampleRate: RATE });
      this.analyser = this.context.createAnalyser();
      this.analyser.fftSize = 32768;
      this.context.createMediaElementSource(this.audio).connect(this.analyser);
      this.analyser.connect(this.context.destination);
    }
    if (this.context.state === "suspended") this.context.resume();
  }

  /** The last `seconds` the element played (at most the analyser's 0.68 s). */
  samples(seconds) {
    if (!this.analyser) return new Float32Array(0);
    const all = new Float32Array(this.analyser.fftSize);
    this.analyser.getFloatTimeDomainData(all);
    return all.subarray(all.length - Math.min(all.length, Math.round(RATE * seconds)));
  }

  rms(seconds = 0.5) { return rms(this.samples(seconds)); }

  dominantFrequency() { return dominantFrequency(this.samples(0.5)); }
}
