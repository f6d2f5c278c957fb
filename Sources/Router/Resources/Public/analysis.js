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
