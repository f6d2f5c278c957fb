// Whether what a client heard is the source without a cut: stretches of the decoded Opus are
// found in the source (decoded by the ffmpeg CLI) by cross-correlation, and each must sit where
// the one before it ended. A skip shows as a jump forward, a repeat as a jump back. The source
// is noise (no two stretches alike), so a stretch has one place only; a tone would match every
// period.
import Foundation
import TestSupport

enum Continuity {
    static let stretch = 4_800  // 100 ms at 48 kHz

    /// Writes `seconds` of pink noise (seeded: every pair's copy is the same) as `noise-<seed>.flac`.
    @discardableResult
    static func noise(seed: Int, seconds: Int, into directory: String, channels: Int = 2) throws -> String {
        let file = directory + "/noise-\(seed).flac"
        try MediaFixture.ffmpeg(["-f", "lavfi", "-i", "anoisesrc=d=\(seconds):c=pink:r=48000:a=0.3:s=\(seed)", "-ac", "\(channels)", file])
        return file
    }

    /// Where `window` best matches `reference`, among offsets within `radius` of `guess`: first
    /// on every 4th offset and sample, then exactly around the best. Answers the offset and the
    /// normalised correlation there (1: the same samples).
    static func locate(_ window: ArraySlice<Float>, in reference: [Float], around guess: Int, radius: Int) -> (offset: Int, score: Double)
    {
        let window = Array(window)
        let low = max(0, guess - radius)
        let high = min(reference.count - window.count, guess + radius)
        guard low <= high else { return (guess, 0) }
        return window.withUnsafeBufferPointer { w in
            reference.withUnsafeBufferPointer { r in
                func score(_ offset: Int, step: Int) -> Double {
                    var dot = 0.0
                    var energyW = 0.0
                    var energyR = 0.0
                    var index = 0
                    while index < w.count {
                        let a = Double(w[index])
                        let b = Double(r[offset + index])
                        dot += a * b
                        energyW += a * a
                        energyR += b * b
                        index += step
                    }
                    return energyW > 0 && energyR > 0 ? dot / (energyW * energyR).squareRoot() : 0
                }
                var best = (offset: low, score: -2.0)
                var offset = low
                while offset <= high {
                    let value = score(offset, step: 4)
                    if value > best.score { best = (offset, value) }
                    offset += 4
                }
                var fine = (offset: best.offset, score: -2.0)
                for offset in max(low, best.offset - 4)...min(high, best.offset + 4) {
                    let value = score(offset, step: 1)
                    if value > fine.score { fine = (offset, value) }
                }
                return fine
            }
        }
    }

    /// What consecutive 100 ms stretches of `heard` (48 kHz mono), from sample `start` on, were
    /// of `reference`: each one's jump from where the one before ended (ms; 0 when continuous),
    /// and the lowest correlation met (how sure the placement is). `guess` is where the first
    /// stretch is thought to be, give or take two seconds.
    static func jumps(
        heard: [Float], from start: Int, stretches: Int, reference: [Float], guess: Int, followRadius: Int = 24_000
    ) -> (jumpsMS: [Double], worstScore: Double) {
        var jumps: [Double] = []
        var worst = 1.0
        var previous: Int?
        for index in 0..<stretches {
            let from = start + index * stretch
            guard from + stretch <= heard.count else { break }
            let expected = previous.map { $0 + stretch } ?? guess
            let found = locate(heard[from..<from + stretch], in: reference, around: expected, radius: previous == nil ? 96_000 : followRadius)
            worst = min(worst, found.score)
            if previous != nil { jumps.append(Double(found.offset - expected) / 48) }
            previous = found.offset
        }
        return (jumps, worst)
    }
}
