// Measures decoded audio the way a listener would notice: which tone is playing and how loud.
import Foundation

/// Frequency and loudness analysis of mono sample arrays.
public enum Spectrum {
    /// The strongest frequency in `samples` (Hann window, radix-2 FFT of the first power-of-two
    /// samples, parabolic interpolation between bins). Accurate to well under 1 Hz for a
    /// second of 48 kHz audio.
    public static func dominantFrequency(_ samples: [Float], sampleRate: Double = 48_000) -> Double {
        var n = 1
        while n * 2 <= samples.count { n *= 2 }
        guard n >= 256 else { return 0 }
        var re = [Double](repeating: 0, count: n)
        var im = [Double](repeating: 0, count: n)
        for i in 0..<n {
            let window = 0.5 - 0.5 * cos(2 * Double.pi * Double(i) / Double(n - 1))
            re[i] = Double(samples[i]) * window
        }
        fft(&re, &im)
        let half = n / 2
        var best = 1
        var bestPower = 0.0
        var power = [Double](repeating: 0, count: half)
        for k in 1..<half {
            power[k] = re[k] * re[k] + im[k] * im[k]
            if power[k] > bestPower {
                bestPower = power[k]
                best = k
            }
        }
        var offset = 0.0
        if best > 1 && best < half - 1 {
            let a = log(power[best - 1] + 1e-30), b = log(power[best] + 1e-30), c = log(power[best + 1] + 1e-30)
            let denominator = a - 2 * b + c
            if denominator != 0 { offset = 0.5 * (a - c) / denominator }
        }
        return (Double(best) + offset) * sampleRate / Double(n)
    }

    /// The amplitude of the sinusoid at `frequency` in `samples`, in dB of full scale (Goertzel,
    /// Hann-windowed): what a band's level is, whatever else plays beside it.
    public static func level(at frequency: Double, _ samples: [Float], sampleRate: Double = 48_000) -> Double {
        guard samples.count > 1 else { return -.infinity }
        let omega = 2 * Double.pi * frequency / sampleRate
        let coefficient = 2 * cos(omega)
        var (s1, s2, windowSum) = (0.0, 0.0, 0.0)
        for (i, sample) in samples.enumerated() {
            let window = 0.5 - 0.5 * cos(2 * Double.pi * Double(i) / Double(samples.count - 1))
            windowSum += window
            let s0 = Double(sample) * window + coefficient * s1 - s2
            s2 = s1
            s1 = s0
        }
        let real = s1 - s2 * cos(omega), imaginary = s2 * sin(omega)
        let amplitude = 2 * (real * real + imaginary * imaginary).squareRoot() / windowSum
        return 20 * log10(max(amplitude, 1e-12))
    }

    /// Root-mean-square level.
    public static func rms(_ samples: [Float]) -> Double {
        guard !samples.isEmpty else { return 0 }
        let sum = samples.reduce(0.0) { $0 + Double($1) * Double($1) }
        return (sum / Double(samples.count)).squareRoot()
    }

    /// Level in dB relative to full scale.
    public static func dBFS(_ samples: [Float]) -> Double {
        20 * log10(max(rms(samples), 1e-12))
    }

    /// The left channel of interleaved stereo samples.
    public static func left(_ interleaved: [Float]) -> [Float] {
        stride(from: 0, to: interleaved.count, by: 2).map { interleaved[$0] }
    }

    private static func fft(_ re: inout [Double], _ im: inout [Double]) {
        let n = re.count
        var j = 0
        for i in 1..<n {
            var bit = n >> 1
            while j & bit != 0 {
                j ^= bit
                bit >>= 1
            }
            j |= bit
            if i < j {
                re.swapAt(i, j)
                im.swapAt(i, j)
            }
        }
        var length = 2
        while length <= n {
            let angle = -2 * Double.pi / Double(length)
            let wRe = cos(angle), wIm = sin(angle)
            var start = 0
            while start < n {
                var curRe = 1.0, curIm = 0.0
                for k in 0..<(length / 2) {
                    let a = start + k, b = a + length / 2
                    let tRe = re[b] * curRe - im[b] * curIm
                    let tIm = re[b] * curIm + im[b] * curRe
                    re[b] = re[a] - tRe
                    im[b] = im[a] - tIm
                    re[a] += tRe
                    im[a] += tIm
                    let nextRe = curRe * wRe - curIm * wIm
                    curIm = curRe * wIm + curIm * wRe
                    curRe = nextRe
                }
                start += length
            }
            length <<= 1
        }
    }
}
