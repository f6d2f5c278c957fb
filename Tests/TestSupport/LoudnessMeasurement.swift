// Loudness measured outside Tonearm: the ffmpeg command line's `ebur128` filter (EBU R128 /
// ITU-R BS.1770), read from its summary.
import Foundation

public enum LoudnessMeasurement {
    public struct Summary: Sendable {
        /// Integrated loudness, LUFS.
        public var integrated: Double
        /// True peak, dBTP.
        public var truePeak: Double
    }

    /// Measures a media file.
    public static func measure(_ file: String) throws -> Summary {
        try measure(["-i", file])
    }

    /// Measures 48 kHz interleaved stereo samples.
    public static func measure(stereo samples: [Float]) throws -> Summary {
        let directory = try TemporaryDirectory()
        let raw = directory.file("pcm.f32")
        try samples.withUnsafeBufferPointer { Data(buffer: $0) }.write(to: URL(fileURLWithPath: raw))
        return try measure(["-f", "f32le", "-ar", "48000", "-ac", "2", "-i", raw])
    }

    private static func measure(_ input: [String]) throws -> Summary {
        let output = try runTool(
            "ffmpeg", ["-nostdin", "-hide_banner", "-nostats"] + input + ["-af", "ebur128=peak=true", "-f", "null", "-"])
        guard let summary = output.range(of: "Summary:") else {
            throw FixtureError("ffmpeg ebur128 printed no summary: \(output.suffix(500))")
        }
        let text = output[summary.upperBound...]
        func value(after label: String) throws -> Double {
            guard let at = text.range(of: label) else { throw FixtureError("no \(label) in \(text)") }
            let number = text[at.upperBound...].drop { $0 == " " }.prefix { "-+.0123456789inf".contains($0) }
            guard let parsed = Double(number) else { throw FixtureError("\(label) \(number) is not a number") }
            return parsed
        }
        return Summary(integrated: try value(after: "I:"), truePeak: try value(after: "Peak:"))
    }
}

extension MediaFixture {
    /// Writes `seconds` of stereo pink noise at `lufs` integrated loudness (measured with ffmpeg's
    /// ebur128 and corrected), as a FLAC file, with extra `-metadata` key=value tags.
    @discardableResult
    public static func noise(
        atLUFS lufs: Double, seconds: Double, into directory: String, name: String, tags: [String] = []
    ) throws -> String {
        let reference = directory + "/reference-" + name + ".flac"
        try ffmpeg(["-f", "lavfi", "-i", "anoisesrc=color=pink:amplitude=0.1:seed=7:d=\(seconds):r=48000", "-ac", "2", reference])
        let measured = try LoudnessMeasurement.measure(reference).integrated
        let file = directory + "/" + name
        try ffmpeg(["-i", reference, "-af", "volume=\(lufs - measured)dB"] + tags.flatMap { ["-metadata", $0] } + [file])
        return file
    }
}
