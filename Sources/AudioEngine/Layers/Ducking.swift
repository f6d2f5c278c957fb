// The track's level under its layers: while a layer sounds, the track falls by the layer's
// `duck_db` over its attack time; once none sounds, it comes back over the release time. The
// level moves in dB at a steady rate, sample by sample, so neither edge clicks.
import Foundation

/// What a play's layers ask of the frame being made: whether one sounds, and how the track ducks.
struct Overlay: Equatable {
    /// A layer's samples are in this frame.
    var sounding = false
    /// How far the track falls under the layers (the deepest of those sounding), in dB.
    var depthDB: Float = 0
    var attackMS = 50
    var releaseMS = 400

    static let none = Overlay()
}

/// The attenuation of the track, carried from frame to frame (a value: the renderer keeps one per
/// frame encoded ahead, to render them again).
struct Ducking: Equatable {
    /// How far the track is down now, in dB (0: not ducked).
    private(set) var attenuationDB: Float = 0

    /// The track is at its own level and nothing is moving.
    var isIdle: Bool { attenuationDB == 0 }

    /// Scales one frame of interleaved stereo in place.
    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>, _ overlay: Overlay) {
        let target = overlay.sounding ? max(overlay.depthDB, 0) : 0
        guard attenuationDB != 0 || target != 0 else { return }
        if attenuationDB == target {
            let gain = Self.gain(attenuationDB)
            for i in samples.indices { samples[i] *= gain }
            return
        }
        // A full duck's depth in `attack` (falling) or `release` (rising) ms, at 48 kHz: a steady
        // rate in dB, so the release ends on time (and exactly at 0 dB).
        let falling = target > attenuationDB
        let samplesForDepth = Float(falling ? overlay.attackMS : overlay.releaseMS) * 48
        let depth = overlay.depthDB > 0 ? overlay.depthDB : max(attenuationDB, target)
        let step = samplesForDepth > 0 ? depth / samplesForDepth : .infinity
        var i = 0
        while i + 1 < samples.count {
            attenuationDB = falling ? min(attenuationDB + step, target) : max(attenuationDB - step, target)
            let gain = Self.gain(attenuationDB)
            samples[i] *= gain
            samples[i + 1] *= gain
            i += 2
        }
    }

    private static func gain(_ attenuationDB: Float) -> Float {
        attenuationDB == 0 ? 1 : Float(pow(10, Double(-attenuationDB) / 20))
    }
}
