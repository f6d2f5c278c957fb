// Lavalink's timescale filter on 48 kHz interleaved stereo, before the other filters: `speed`
// changes the tempo and keeps the pitch, `pitch` the pitch and keeps the tempo, `rate` both (a
// record played faster). Two stages: WSOLA time-stretching by speed ÷ pitch, then resampling by
// pitch × rate. The source's time runs at speed × rate of real time; each output frame says how
// much of it it used, so positions stay in source time.
import EngineAPI
import Foundation

/// The timescale stage: source frames in, output frames out (in different numbers).
package struct TimescaleStage {
    private(set) var settings: Timescale
    private var stretcher: TimeStretcher
    private var resampler: RateResampler
    /// Source time the frames taken so far cover, in samples; moves at speed × rate per frame.
    private var sourceSamples = 0.0
    /// Source samples pushed, and how many of them were the source's (not the silence after it).
    private var pushed = 0
    private var realSamples: Int?

    package init(_ settings: Timescale) {
        self.settings = settings
        stretcher = TimeStretcher(tempo: settings.speed / settings.pitch)
        resampler = RateResampler(ratio: settings.pitch * settings.rate)
    }

    mutating func set(_ settings: Timescale) {
        guard settings != self.settings else { return }
        self.settings = settings
        stretcher.tempo = settings.speed / settings.pitch
        resampler.ratio = settings.pitch * settings.rate
    }

    /// Takes one source frame.
    package mutating func push(_ frame: UnsafeBufferPointer<Float>) {
        stretcher.push(frame)
        pushed += frame.count / 2
    }

    /// The source has ended: what is pushed from now on is silence to push the rest out.
    mutating func sourceEnded() { realSamples = realSamples ?? pushed }

    /// The source ended and its last sample has been played.
    var hasPlayedAll: Bool { realSamples.map { sourceSamples >= Double($0) } ?? false }

    /// Fills `out` with the next output frame, or says that it needs another source frame first.
    /// Returns the source time the frame covers, in microseconds.
    package mutating func pull(into out: UnsafeMutableBufferPointer<Float>) -> Int? {
        while !resampler.canFill(out.count / 2) {
            guard let produced = stretcher.nextHop() else { return nil }
            resampler.push(produced)
        }
        resampler.fill(out)
        // Whole microseconds, with the remainder carried so that nothing drifts over a long track.
        let before = (sourceSamples * 1_000_000 / FilterChain.sampleRate).rounded(.down)
        sourceSamples += Double(out.count / 2) * settings.speed * settings.rate
        return Int((sourceSamples * 1_000_000 / FilterChain.sampleRate).rounded(.down) - before)
    }

    /// Ends the stage: the source samples it took but did not play, from exactly where its output
    /// stopped (the waveform continues without a jump), for the plain path to play next.
    mutating func release() -> [Float] { resampler.unplayed() + stretcher.unplayed() }
}

/// WSOLA (waveform-similarity overlap-add): 40 ms Hann-windowed segments of the source laid down
/// every 20 ms of output, each taken from within ±10 ms of where the tempo puts it at the offset
/// whose start best matches how the previous segment would have gone on, so waveforms join in
/// phase. At tempo 1 every segment is the natural continuation and the output is the input.
struct TimeStretcher {
    /// Output per segment: one 20 ms frame.
    static let hop = OpusEncoder.samplesPerFrame
    static let window = 2 * hop
    /// How far a segment may move from its nominal place to find a match.
    static let tolerance = hop / 2
    /// The coarse search compares every `decimation`th sample (of 4-sample sums), then refines.
    static let decimation = 4

    /// Source samples per output sample.
    var tempo: Double
    /// Interleaved stereo; `input[0]` is source sample frame `inputStart`.
    private var input: [Float] = []
    private var inputStart = 0
    /// Where the next segment nominally starts, in source sample frames.
    private var nominal = 0.0
    /// Where the last segment would have gone on. Its second half, still to be added to the next
    /// hop, is always the source from here, fading out: so it is not stored, and the first
    /// segment (the source from 0) continues a virtual one before it without a fade in.
    private var natural = 0
    private var reference = [Float](repeating: 0, count: hop / decimation)
    private var decimated: [Float] = []
    private var mono: [Float] = []

    /// Sin² rising half of the Hann window; the falling half is 1 minus it, so the two sum to 1.
    private static let rising: [Float] = (0..<hop).map { n in
        let s = Float(sin(Double.pi * Double(n) / Double(window)))
        return s * s
    }

    init(tempo: Double) { self.tempo = tempo }

    mutating func push(_ frame: UnsafeBufferPointer<Float>) { input.append(contentsOf: frame) }

    private var inputEnd: Int { inputStart + input.count / 2 }

    /// The next hop of output (20 ms), or nil until enough source has been pushed.
    mutating func nextHop() -> [Float]? {
        let hop = Self.hop
        let start: Int
        if natural == Int(nominal.rounded(.down)) && tempo == 1 {
            // In step with the source: the natural continuation is the answer, no search.
            start = natural
            guard natural + Self.window <= inputEnd else { return nil }
        } else {
            let centre = Int(nominal.rounded(.down))
            let lowest = max(centre - Self.tolerance, inputStart)
            let highest = centre + Self.tolerance
            guard highest + Self.window <= inputEnd, natural + hop <= inputEnd else { return nil }
            start = bestMatch(from: lowest, through: highest)
        }
        var out = [Float](repeating: 0, count: 2 * hop)
        let rising = Self.rising
        let fading = 2 * (natural - inputStart), rise = 2 * (start - inputStart)
        input.withUnsafeBufferPointer { x in
            for n in 0..<hop {
                let up = rising[n], down = 1 - rising[n]
                out[2 * n] = x[fading + 2 * n] * down + x[rise + 2 * n] * up
                out[2 * n + 1] = x[fading + 2 * n + 1] * down + x[rise + 2 * n + 1] * up
            }
        }
        natural = start + hop
        nominal += Double(hop) * tempo
        // Keep what the next search and the natural continuation can still reach.
        let keep = min(natural, Int(nominal.rounded(.down)) - Self.tolerance)
        if keep - inputStart > 4 * hop {
            input.removeFirst(2 * (keep - inputStart))
            inputStart = keep
        }
        return out
    }

    /// Σ a[i]·b[i], eight lanes at a time (`count` is a multiple of 8).
    private static func dot(_ a: UnsafePointer<Float>, _ b: UnsafePointer<Float>, count: Int) -> Float {
        var sum = SIMD8<Float>()
        var i = 0
        while i < count {
            let x = UnsafeRawPointer(a + i).loadUnaligned(as: SIMD8<Float>.self)
            let y = UnsafeRawPointer(b + i).loadUnaligned(as: SIMD8<Float>.self)
            sum += x * y
            i += 8
        }
        return sum.sum()
    }

    /// The source from where the output stopped: the last segment's second half is the source at
    /// `natural`, faded out, so the source from there, unfaded, continues the output exactly.
    func unplayed() -> [Float] {
        let from = 2 * (natural - inputStart)
        guard from >= 0, from <= input.count else { return [] }
        return Array(input[from...])
    }

    /// The start in `lowest...highest` whose first 20 ms best match the natural continuation
    /// (normalised cross-correlation of the mono sum): coarsely on 4-sample sums, then sample by
    /// sample around the best.
    private mutating func bestMatch(from lowest: Int, through highest: Int) -> Int {
        let hop = Self.hop, step = Self.decimation
        let coarseLength = hop / step
        let span = highest - lowest
        let candidates = span / step + 1
        let count = candidates + coarseLength
        if decimated.count < count { decimated = [Float](repeating: 0, count: count) }
        input.withUnsafeBufferPointer { x in
            func sum(_ frame: Int) -> Float {
                var total: Float = 0
                let i = 2 * (frame - inputStart)
                for j in 0..<step { total += x[i + 2 * j] + x[i + 2 * j + 1] }
                return total
            }
            for i in 0..<coarseLength { reference[i] = sum(natural + i * step) }
            for i in 0..<count where lowest + i * step + step <= inputEnd { decimated[i] = sum(lowest + i * step) }
        }
        var best = lowest, bestScore = -Float.infinity
        decimated.withUnsafeBufferPointer { d in
            reference.withUnsafeBufferPointer { r in
                guard let d = d.baseAddress, let r = r.baseAddress else { return }
                var energy: Float = 1e-9
                for i in 0..<coarseLength { energy += d[i] * d[i] }
                for c in 0..<candidates {
                    let score = Self.dot(r, d + c, count: coarseLength) / energy.squareRoot()
                    if score > bestScore {
                        bestScore = score
                        best = lowest + c * step
                    }
                    // Slide the window's energy on by one (held above 0 against rounding).
                    energy = max(1e-9, energy - d[c] * d[c] + d[c + coarseLength] * d[c + coarseLength])
                }
            }
        }
        // Refine at full resolution around the coarse best, on the mono sum.
        let fineLow = max(lowest, best - step + 1), fineHigh = min(highest, best + step - 1)
        let fineSpan = fineHigh - fineLow + hop
        if mono.count < hop + fineSpan { mono = [Float](repeating: 0, count: hop + fineSpan) }
        input.withUnsafeBufferPointer { x in
            let n0 = 2 * (natural - inputStart), f0 = 2 * (fineLow - inputStart)
            for n in 0..<hop { mono[n] = x[n0 + 2 * n] + x[n0 + 2 * n + 1] }
            for n in 0..<fineSpan { mono[hop + n] = x[f0 + 2 * n] + x[f0 + 2 * n + 1] }
        }
        var refined = best
        bestScore = -Float.infinity
        mono.withUnsafeBufferPointer { m in
            guard let m = m.baseAddress else { return }
            for candidate in fineLow...fineHigh {
                let v = m + hop + (candidate - fineLow)
                let score = Self.dot(m, v, count: hop) / Self.dot(v, v, count: hop).squareRoot().nextUp
                if score > bestScore {
                    bestScore = score
                    refined = candidate
                }
            }
        }
        return refined
    }
}

/// Reads its input `ratio` samples per output sample (above 1 the pitch rises), interpolating
/// between samples with a Catmull-Rom cubic.
struct RateResampler {
    var ratio: Double
    /// Interleaved stereo, starting one sample before `position`'s sample (the cubic's left point).
    private var buffer: [Float] = [0, 0]
    /// The next output sample's place in `buffer`, in sample frames.
    private var position = 1.0

    init(ratio: Double) { self.ratio = ratio }

    mutating func push(_ samples: [Float]) { buffer.append(contentsOf: samples) }

    private var frames: Int { buffer.count / 2 }

    func canFill(_ count: Int) -> Bool {
        Int((position + Double(count - 1) * ratio).rounded(.down)) + 2 < frames
    }

    /// Fills `out` (call only when `canFill`).
    mutating func fill(_ out: UnsafeMutableBufferPointer<Float>) {
        let count = out.count / 2
        buffer.withUnsafeBufferPointer { x in
            if ratio == 1 && position == position.rounded(.down) {
                let first = 2 * Int(position)
                for i in 0..<(2 * count) { out[i] = x[first + i] }
                return
            }
            for n in 0..<count {
                let place = position + Double(n) * ratio
                let i = Int(place.rounded(.down))
                let t = Float(place - Double(i))
                for channel in 0..<2 {
                    let p0 = x[2 * (i - 1) + channel], p1 = x[2 * i + channel]
                    let p2 = x[2 * (i + 1) + channel], p3 = x[2 * (i + 2) + channel]
                    let a = -0.5 * p0 + 1.5 * p1 - 1.5 * p2 + 0.5 * p3
                    let b = p0 - 2.5 * p1 + 2 * p2 - 0.5 * p3
                    let c = -0.5 * p0 + 0.5 * p2
                    out[2 * n + channel] = ((a * t + b) * t + c) * t + p1
                }
            }
        }
        position += Double(count) * ratio
        let drop = Int(position.rounded(.down)) - 1
        if drop > 0 {
            buffer.removeFirst(2 * drop)
            position -= Double(drop)
        }
    }

    /// The input not yet played, from the next output sample's place (its fraction dropped).
    func unplayed() -> [Float] {
        let from = 2 * Int(position.rounded(.down))
        return from < buffer.count ? Array(buffer[from...]) : []
    }
}
