// Loudness normalisation: a track is brought to a target loudness (−14 LUFS by default) by one
// smooth gain, taken from its ReplayGain/R128 tag when it has one, else from a running EBU R128
// (ITU-R BS.1770-4) measurement of what has played so far, followed by a look-ahead peak limiter
// so that raising a quiet track never clips. Runs first on each 20 ms frame of 48 kHz stereo,
// before the filters and the volume, so that it measures the source and not what a filter made of it.
import Foundation

/// BS.1770-4's integrated loudness, kept up to date as samples arrive: K-weighting, mean square
/// over 400 ms blocks every 100 ms, absolute gate at −70 LUFS, relative gate 10 LU below.
/// The two channels run side by side in the lanes of `SIMD2<Double>` (one biquad step for both),
/// and the filters' memories are values, not arrays: a copy of the meter (the renderer keeps one
/// per frame ahead) allocates nothing.
struct LoudnessMeter {
    typealias Lanes = SIMD2<Double>
    /// The K-weighting filter's two stages at 48 kHz (BS.1770-4, tables 1 and 2).
    private static let shelf = (b0: 1.53512485958697, b1: -2.69169618940638, b2: 1.19839281085285, a1: -1.69065929318241, a2: 0.73248077421585)
    private static let highPass = (b0: 1.0, b1: -2.0, b2: 1.0, a1: -1.99004745483398, a2: 0.99007225036621)
    static let subblockSamples = 4_800
    /// Block loudness is kept as a histogram (0.1 LU bins from −70 to +10 LUFS): the gates need
    /// every block of the track, and this holds them in 3.2 KB however long it plays.
    private static let binWidth = 0.1, lowest = -70.0, bins = 800

    /// Two biquad memories per stage, one lane per channel.
    private var shelf1 = Lanes(), shelf2 = Lanes(), high1 = Lanes(), high2 = Lanes()
    private var subblockSum = Lanes()
    private var subblockFill = 0
    /// The last four 100 ms sub-blocks' mean squares (summed over the two channels).
    private var recent = SIMD4<Double>()
    private var subblocks = 0
    /// Sub-blocks above the absolute gate: silence before the music does not count as measuring it.
    private var audibleSubblocks = 0
    private var histogram = [UInt32](repeating: 0, count: bins)
    private var blocks = 0
    private var gatedEnergy = 0.0

    /// The track's integrated loudness so far; before the first 400 ms block, the loudness of what
    /// has been heard; nil while everything has been below the absolute gate (silence).
    var loudness: Double? {
        if blocks > 0 { return integrated }
        let available = min(subblocks, 4)
        guard available > 0 else { return nil }
        var energy = 0.0
        for index in 0..<available { energy += recent[index] }
        let level = Self.lufs(energy / Double(available))
        return level > Self.lowest ? level : nil
    }

    /// Seconds of audible sound measured.
    var seconds: Double { Double(audibleSubblocks) * 0.1 }

    /// Measures the samples (interleaved stereo); returns whether a 100 ms sub-block ended among
    /// them (the loudness may have changed).
    @discardableResult
    mutating func add(_ samples: UnsafeMutableBufferPointer<Float>) -> Bool {
        guard let base = samples.baseAddress else { return false }
        var ended = false
        let s = Self.shelf, h = Self.highPass
        let sb0 = Lanes(repeating: s.b0), sb1 = Lanes(repeating: s.b1), sb2 = Lanes(repeating: s.b2)
        let sa1 = Lanes(repeating: s.a1), sa2 = Lanes(repeating: s.a2)
        let hb1 = Lanes(repeating: h.b1), ha1 = Lanes(repeating: h.a1), ha2 = Lanes(repeating: h.a2)
        // The memories live in registers through the loop.
        var m1 = shelf1, m2 = shelf2, n1 = high1, n2 = high2, sum = subblockSum
        var fill = subblockFill
        for frame in 0..<samples.count / 2 {
            let x = Lanes(Double(base[2 * frame]), Double(base[2 * frame + 1]))
            let y = sb0 * x + m1
            m1 = sb1 * x - sa1 * y + m2
            m2 = sb2 * x - sa2 * y
            let z = y + n1  // the high-pass's b0 and b2 are 1
            n1 = hb1 * y - ha1 * z + n2
            n2 = y - ha2 * z
            sum += z * z
            fill += 1
            if fill == Self.subblockSamples {
                endSubblock(sum.sum())
                sum = Lanes()
                fill = 0
                ended = true
            }
        }
        // Denormals are flushed once a frame (silence decays the memories towards them).
        shelf1 = Self.flushed(m1)
        shelf2 = Self.flushed(m2)
        high1 = Self.flushed(n1)
        high2 = Self.flushed(n2)
        subblockSum = sum
        subblockFill = fill
        return ended
    }

    private static func flushed(_ value: Lanes) -> Lanes {
        Lanes(value[0].flushed, value[1].flushed)
    }

    private mutating func endSubblock(_ sum: Double) {
        let meanSquare = sum / Double(Self.subblockSamples)
        recent[subblocks % 4] = meanSquare
        subblocks += 1
        if Self.lufs(meanSquare) > Self.lowest { audibleSubblocks += 1 }
        guard subblocks >= 4 else { return }
        let energy = recent.sum() / 4
        let level = Self.lufs(energy)
        guard level > Self.lowest else { return }
        histogram[min(Int((level - Self.lowest) / Self.binWidth), Self.bins - 1)] += 1
        blocks += 1
        gatedEnergy += energy
    }

    private var integrated: Double {
        let relativeGate = Self.lufs(gatedEnergy / Double(blocks)) - 10
        var count = 0.0, energy = 0.0
        for bin in 0..<Self.bins where histogram[bin] > 0 {
            let level = Self.lowest + (Double(bin) + 0.5) * Self.binWidth
            guard level > relativeGate else { continue }
            count += Double(histogram[bin])
            energy += Double(histogram[bin]) * pow(10, (level + 0.691) / 10)
        }
        return count > 0 ? Self.lufs(energy / count) : relativeGate + 10
    }

    static func lufs(_ meanSquare: Double) -> Double {
        meanSquare > 0 ? -0.691 + 10 * log10(meanSquare) : -.infinity
    }
}

/// The gain that brings a track to `target` LUFS, applied smoothly, then the limiter.
package struct LoudnessNormalizer {
    static let defaultTarget = -14.0
    /// Targets an operator may choose (TONEARM_LOUDNESS_TARGET).
    static let targetRange = -40.0 ... -5.0
    /// The most a quiet track is raised and a loud one lowered.
    static let gainRange = -30.0...24.0
    /// How fast the gain may move, in dB per second: while the first 3 s are measured, down at
    /// once (over one frame: a loud track is heard too loud only until its first 100 ms are
    /// measured) and up quickly (a quiet track is not heard quiet for long); then slowly, and
    /// faster down than up, so that what is heard does not pump with the music.
    static let settlingSeconds = 3.0
    static let settlingRise = 60.0, settlingFall = Double.infinity, riseRate = 1.5, fallRate = 6.0

    let target: Double
    /// From the track's tags: the gain is known at once and fixed, and nothing is measured.
    private(set) var taggedLoudness: Double?
    private var meter = LoudnessMeter()
    /// The gain reached at the end of the last frame, in dB, and the one the measurement asks for.
    private(set) var gainDB: Double
    private var wantedDB: Double
    private var limiter: PeakLimiter
    /// Normalisation was turned off: the gain goes back to 0 dB over the next frame (as a volume
    /// change does), then the limiter's delay is crossfaded away and the pipeline drops this.
    var stopping = false
    /// The last frame has been crossfaded to the undelayed sound: dropping this changes nothing heard.
    private(set) var isFinished = false

    /// `midStream`: the play has been heard already, so the limiter's 1 ms delay is crossfaded in
    /// over the first frame rather than starting with 1 ms of silence (a click).
    package init(target: Double, taggedLoudness: Double?, midStream: Bool = false) {
        self.target = target
        self.taggedLoudness = taggedLoudness
        limiter = PeakLimiter(fadeIn: midStream)
        let tagged = taggedLoudness.map { Self.clamp(target - $0) }
        gainDB = tagged ?? 0
        wantedDB = gainDB
    }

    /// The next track starts (a gapless join or a crossfade): its loudness is read from its tag or
    /// measured afresh, and the gain moves there from where this track left it, without a jump.
    mutating func startTrack(taggedLoudness: Double?) {
        self.taggedLoudness = taggedLoudness
        meter = LoudnessMeter()
        wantedDB = taggedLoudness.map { Self.clamp(target - $0) } ?? gainDB
    }

    /// What the meter has measured of the track (nil while tagged, or before anything audible).
    var measured: (loudness: Double, seconds: Double)? {
        guard taggedLoudness == nil, let loudness = meter.loudness else { return nil }
        return (loudness, meter.seconds)
    }

    /// Whether a track needs normalising at all: not when its tag puts it within 0.5 LU of the
    /// target (an Opus source then stays passthrough).
    static func isNeeded(taggedLoudness: Double?, target: Double) -> Bool {
        taggedLoudness.map { abs($0 - target) >= 0.5 } ?? true
    }

    private static func clamp(_ gain: Double) -> Double { min(max(gain, gainRange.lowerBound), gainRange.upperBound) }

    /// Measures, scales and limits one frame of interleaved stereo in place. `beforeLimiting`
    /// changes the scaled frame before the limiter sees it (a play's layers are mixed in there:
    /// measured apart from the track, limited with it).
    package mutating func process(
        _ samples: UnsafeMutableBufferPointer<Float>, beforeLimiting: (UnsafeMutableBufferPointer<Float>) -> Void = { _ in }
    ) {
        let frames = samples.count / 2
        if taggedLoudness == nil && !stopping {
            if meter.add(samples), let measured = meter.loudness {
                wantedDB = Self.clamp(target - measured)
            }
        }
        if stopping && gainDB == 0 && !limiter.isLimiting {
            beforeLimiting(samples)
            limiter.process(samples, fadeOut: true)
            isFinished = true
            return
        }
        let seconds = Double(frames) / FilterChain.sampleRate
        let settling = meter.seconds < Self.settlingSeconds
        let rise = (settling ? Self.settlingRise : Self.riseRate) * seconds
        let fall = (settling ? Self.settlingFall : Self.fallRate) * seconds
        let next = stopping ? 0 : gainDB + min(max(wantedDB - gainDB, -fall), rise)
        let start = Float(pow(10, gainDB / 20)), end = Float(pow(10, next / 20))
        gainDB = next
        let step = (end - start) / Float(max(frames, 1))
        var i = 0
        while i + 1 < samples.count {
            let g = start + step * Float(i / 2 + 1)
            samples[i] *= g
            samples[i + 1] *= g
            i += 2
        }
        beforeLimiting(samples)
        limiter.process(samples)
    }
}

/// A look-ahead limiter that keeps the signal's true peak (estimated at twice the sample rate by
/// cubic interpolation between samples) at or below −1.5 dBTP: the half dB is for what that
/// estimate misses and what Opus adds, so that the listener's decoded stream stays at or below
/// −1 dBTP (a loud layer over a loud track measured −0.9 dBTP decoded with the ceiling at −1). The gain reaches what a peak needs by
/// the time that peak is played (attack over the 1 ms look-ahead) and recovers over about 100 ms,
/// so it shapes the envelope instead of clipping the wave. It delays the sound by its look-ahead;
/// started or stopped mid-play, that delay is crossfaded in or out over one frame.
struct PeakLimiter {
    static let ceiling: Float = 0.841  // −1.5 dBTP
    static let lookahead = 48  // samples (1 ms at 48 kHz)
    /// The true-peak estimate of a sample needs the two after it: gains are known 2 samples late.
    private static let window = lookahead - 2 + 1
    private static let release: Float = 1 - exp(-1 / (0.1 * 48_000))

    /// The delay line (interleaved stereo), the last four input samples per channel, the required
    /// gains of the last `window` samples and their running minima, and the smoothed gain.
    private var delay = [Float](repeating: 0, count: 2 * lookahead)
    private var delayIndex = 0
    private var history = [Float](repeating: 0, count: 8)
    private var required = [Float](repeating: 1, count: window)
    private var minima = [Float](repeating: 1, count: window)
    private var minimaSum = Float(window)
    private var ringIndex = 0
    /// Samples since a required gain below 1 was last seen (past `window`, the minimum is 1).
    private var sinceLimit = window
    private var envelope: Float = 1
    /// The first frame crossfades from the undelayed sound to the delayed one.
    private var fadeIn: Bool

    /// Whether a frame no sample of which can need limiting is only delayed (`delayOnly`); off
    /// only in the test that compares the two ways.
    private let shortcut: Bool

    init(fadeIn: Bool = false, shortcut: Bool = true) {
        self.fadeIn = fadeIn
        self.shortcut = shortcut
    }

    /// Whether the limiter is reducing the gain (or about to).
    var isLimiting: Bool { envelope < 1 || sinceLimit < Self.window }

    /// `fadeOut`: this frame crossfades from the delayed sound to the undelayed one (the last).
    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>, fadeOut: Bool = false) {
        let crossfade = fadeIn || fadeOut
        if shortcut && !crossfade && !isLimiting && minima.allSatisfy({ $0 == 1 }) && delayOnly(samples) { return }
        // The weight of the delayed sound goes 0 → 1 (fade in) or 1 → 0 (fade out) over the frame.
        let weightStep = (fadeOut ? -1 : 1) / Float(max(samples.count / 2, 1))
        var weight: Float = fadeOut ? 1 : 0
        fadeIn = false
        var i = 0
        while i + 1 < samples.count {
            // Peak around the sample two behind: itself and the half-way points either side.
            var peak: Float = 0
            for channel in 0..<2 {
                let h = channel * 4
                let x0 = history[h], x1 = history[h + 1], x2 = history[h + 2], x3 = history[h + 3]
                let x4 = samples[i + channel]
                let before = (9 * (x1 + x2) - (x0 + x3)) / 16
                let after = (9 * (x2 + x3) - (x1 + x4)) / 16
                peak = max(peak, abs(x2), abs(before), abs(after))
                history[h] = x1
                history[h + 1] = x2
                history[h + 2] = x3
                history[h + 3] = x4
            }
            let need: Float = peak > Self.ceiling && peak.isFinite ? Self.ceiling / peak : (peak.isFinite ? 1 : 0)
            required[ringIndex] = need
            sinceLimit = need < 1 ? 0 : min(sinceLimit + 1, Self.window)
            var minimum: Float = 1
            if sinceLimit < Self.window {
                for value in required where value < minimum { minimum = value }
            }
            minimaSum += minimum - minima[ringIndex]
            minima[ringIndex] = minimum
            ringIndex = ringIndex + 1 == Self.window ? 0 : ringIndex + 1
            // The average of the minima is below every required gain in the window (attack); the
            // envelope follows it down at once and back up slowly (release).
            let average = min(minimaSum / Float(Self.window), 1)
            let released = envelope + (1 - envelope) * Self.release
            envelope = min(average, released > 0.99999 ? 1 : released)
            let left = delay[delayIndex], right = delay[delayIndex + 1]
            delay[delayIndex] = samples[i]
            delay[delayIndex + 1] = samples[i + 1]
            delayIndex = delayIndex + 2 == delay.count ? 0 : delayIndex + 2
            if crossfade {
                // For this one frame, the envelope reaches the undelayed part 1 ms late.
                weight += weightStep
                samples[i] = (weight * left + (1 - weight) * samples[i]) * envelope
                samples[i + 1] = (weight * right + (1 - weight) * samples[i + 1]) * envelope
            } else {
                samples[i] = left * envelope
                samples[i + 1] = right * envelope
            }
            i += 2
        }
        // The running sum drifts with rounding; it is recomputed once a frame.
        minimaSum = minima.reduce(0, +)
    }

    /// The frame when no sample of it can need limiting: it is only delayed (when nothing was
    /// limited for a window and the minima the envelope averages are all back at 1; the envelope
    /// snaps to 1 a little before they are). A half-way point's
    /// estimate, (9(x1 + x2) − (x0 + x3)) / 16, is at most 20/16 of the largest of the four
    /// samples it is made of, so if 1.25 × the largest magnitude among the frame and the four
    /// samples before it stays at the ceiling, every estimate the sample loop would make does too:
    /// it would require a gain of 1 everywhere and leave the envelope at 1, which is what this
    /// does, without the per-sample estimate. The result is the same sample for sample
    /// (`LoudnessTests.theLimitersShortcutGivesWhatTheSampleLoopGives`). False: nothing was done.
    private mutating func delayOnly(_ samples: UnsafeMutableBufferPointer<Float>) -> Bool {
        let count = samples.count
        guard let base = samples.baseAddress, count >= delay.count, count % 2 == 0 else { return false }
        // The largest magnitude as the largest bit pattern with the sign cleared (for floats of
        // one sign the patterns order as the numbers do; a NaN's is above infinity's, so it
        // fails the test below): an integer maximum, which the compiler vectorises.
        var largestBits: UInt32 = 0
        UnsafeRawPointer(base).withMemoryRebound(to: UInt32.self, capacity: count) { words in
            for index in 0..<count { largestBits = max(largestBits, words[index] & 0x7FFF_FFFF) }
        }
        var largest = Float(bitPattern: largestBits)
        for value in history { largest = max(largest, abs(value)) }
        // Not-a-number fails this test too, and goes the sample loop's way.
        guard largest * 1.25 <= Self.ceiling else { return false }
        let line = delay.count
        withUnsafeTemporaryAllocation(of: Float.self, capacity: line) { tail in
            guard let tailBase = tail.baseAddress else { return }
            tailBase.update(from: base + (count - line), count: line)
            (base + line).update(from: base, count: count - line)  // overlapping: a memmove
            delay.withUnsafeBufferPointer { ring in
                guard let ringBase = ring.baseAddress else { return }
                // The oldest delayed sample is at `delayIndex`.
                base.update(from: ringBase + delayIndex, count: line - delayIndex)
                (base + (line - delayIndex)).update(from: ringBase, count: delayIndex)
            }
            delay.withUnsafeMutableBufferPointer { ring in
                ring.baseAddress?.update(from: tailBase, count: line)
            }
        }
        delayIndex = 0
        // The ring of gains moves on as in the sample loop (its values are all 1), so that the
        // sum taken over it at the end of a frame adds them in the same order.
        ringIndex = (ringIndex + count / 2) % Self.window
        // The last four input samples per channel, as the sample loop would leave them: the
        // newest frames of the delay line now.
        for channel in 0..<2 {
            for offset in 0..<4 { history[channel * 4 + offset] = delay[line - 8 + 2 * offset + channel] }
        }
        return true
    }
}
