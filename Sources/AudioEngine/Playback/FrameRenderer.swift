// The second half of a play's chain: 20 ms of decoded (and time-scaled) PCM → loudness → filters →
// gain → Opus. It keeps, for each frame encoded ahead of the pacer, the frame's input and every
// state the frame was rendered from, so that a change of volume, filters or normalisation can
// render the frames not yet sent again: the change is then heard from the next frame sent, however
// long the encoded lead is.
import CoreMetrics
import EngineAPI

/// What shapes the sound after the source: the part of a session's settings a frame already
/// encoded can be rendered again with. The timescale is not in it: it decides which source
/// samples a frame holds, so a frame made under one cannot be remade under another.
struct RenderSettings: Equatable {
    var volume: Int
    var filters: Filters
    var normalize: Bool

    init(volume: Int = 100, filters: Filters = Filters(), normalize: Bool = false) {
        self.volume = volume
        self.filters = filters
        self.filters.timescale = nil
        self.normalize = normalize
    }
}

/// Loudness → filters → gain → encode, for one play, on the worker that owns the pipeline.
final class FrameRenderer {
    /// Everything a frame's sound depends on besides its input: all values, so a copy is a
    /// snapshot (the encoder's bytes are copied apart).
    fileprivate struct State {
        var normalizer: LoudnessNormalizer?
        var filterChain = FilterChain()
        /// The gain the last frame ended on; the next frame ramps from here to the target.
        var gain: Float = 1
        /// A frame of this play has been heard (a normaliser started now measures mid-stream).
        var heard = false
        /// How far the track is ducked under its layers.
        var ducking = Ducking()
    }

    /// A frame encoded ahead: its input and the states before it.
    private struct Kept {
        var sequence: UInt64 = .max
        /// Allocated at the first frame rendered (a passthrough play never pays for it).
        var input: [Float] = []
        /// The layers' samples mixed into the frame (allocated at the first frame with a layer).
        var layer: [Float] = []
        var overlay = Overlay.none
        var hasLayer = false
        var settings = RenderSettings()
        var state = State()
        var encoderState = OpusEncoderSnapshot()
    }

    /// The live state after the last frame rendered, saved before frames are rendered again and
    /// put back if the new frames cannot replace the old.
    struct Saved {
        fileprivate let state: State
        fileprivate let encoderState: OpusEncoderSnapshot?
    }

    /// Frames rendered again from `first` on, not yet in the outbox.
    struct Again {
        let first: UInt64
        let packets: [[UInt8]]
        fileprivate let kept: [(state: State, encoderState: OpusEncoderSnapshot)]
        fileprivate let settings: RenderSettings
    }

    private var state = State()
    private var encoder: OpusEncoder?
    private let encoderConfiguration: OpusEncoderConfiguration
    let loudnessTarget: Double
    /// The loudness the track's tags give, once the source is open.
    var taggedLoudness: Double?
    private let encodeTime: CoreMetrics.Timer?
    /// The engine's complexity in force and remembered loudness (nil in tests: the configuration's).
    let render: RenderContext?
    /// One per frame the outbox can hold, indexed by sequence modulo their count.
    private var kept: [Kept]
    /// Frames rendered so far in this play; the next one is this number.
    private(set) var rendered: UInt64 = 0
    /// The frame being rendered; allocated at the first.
    private var pcm: [Float] = []

    init(
        encoder configuration: OpusEncoderConfiguration, loudnessTarget: Double, keep: Int, encodeTime: CoreMetrics.Timer?,
        render: RenderContext? = nil
    ) {
        self.render = render
        encoderConfiguration = configuration
        self.loudnessTarget = loudnessTarget
        self.encodeTime = encodeTime
        kept = Array(repeating: Kept(), count: max(keep, 1))
    }

    /// Whether a frame at `volume` would come out as it went in: no normaliser, no filter, no
    /// gain, no ducking.
    func leavesUnchanged(volume: Int) -> Bool {
        volume == 100 && state.gain == 1 && state.filterChain.isIdentity && state.normalizer == nil && state.ducking.isIdle
    }

    /// A frame went out without the renderer (passthrough): it has been heard, and no frame
    /// before it can be rendered again. The encoder goes too: one used before the passthrough
    /// would start the next frame it encodes with the last 6.5 ms it was given (its look-ahead),
    /// where a fresh one starts with 6.5 ms of silence.
    func passedThrough() {
        state.heard = true
        encoder = nil
        forget()
    }

    /// What the normaliser has measured of the track so far (nil: not measuring, or tagged).
    var measuredLoudness: (loudness: Double, seconds: Double)? { state.normalizer?.measured }

    /// The next track of a gapless join or a crossfade goes through from here.
    func startTrack(taggedLoudness: Double?) {
        self.taggedLoudness = taggedLoudness
        state.normalizer?.startTrack(taggedLoudness: taggedLoudness)
    }

    /// Keeps `count` frames from now on, where it kept fewer (the engine's lead deepened during
    /// the play): each frame kept so far moves to its place in the larger ring.
    func keep(_ count: Int) {
        guard count > kept.count else { return }
        var larger = Array(repeating: Kept(), count: count)
        for frame in kept where frame.sequence != .max { larger[Int(frame.sequence % UInt64(count))] = frame }
        kept = larger
    }

    /// Frames already rendered are gone (a seek discarded them): none is rendered again.
    func forget() {
        for index in kept.indices { kept[index].sequence = .max }
    }

    /// Takes `settings` on (filters, normalisation; the volume ramps during the next frame).
    func apply(_ settings: RenderSettings) {
        apply(settings, to: &state)
    }

    /// Renders one frame of `input` with `settings` (taken on with `apply` before), with `layer`
    /// (the play's layers, summed at their levels) mixed in as `overlay` says, and encodes it,
    /// keeping what it takes to do it again. Returns the packet; the frame's sequence number is
    /// `rendered - 1` after.
    func render(
        _ input: UnsafeBufferPointer<Float>, layer: UnsafeBufferPointer<Float>? = nil, overlay: Overlay = .none,
        settings: RenderSettings
    ) throws -> [UInt8] {
        let encoder = try encoder ?? OpusEncoder(configuration: encoderConfiguration)
        self.encoder = encoder
        if let lead = render?.lead, lead > kept.count { keep(lead) }
        let slot = Int(rendered % UInt64(kept.count))
        kept[slot].sequence = rendered
        kept[slot].settings = settings
        kept[slot].state = state
        encoder.save(into: &kept[slot].encoderState)
        if kept[slot].input.count != OpusEncoder.frameFloats { kept[slot].input = [Float](repeating: 0, count: OpusEncoder.frameFloats) }
        kept[slot].input.withUnsafeMutableBufferPointer { copy in
            guard let to = copy.baseAddress, let from = input.baseAddress else { return }
            to.update(from: from, count: min(copy.count, input.count))
        }
        kept[slot].overlay = overlay
        kept[slot].hasLayer = layer != nil
        if let layer {
            if kept[slot].layer.count != OpusEncoder.frameFloats { kept[slot].layer = [Float](repeating: 0, count: OpusEncoder.frameFloats) }
            kept[slot].layer.withUnsafeMutableBufferPointer { copy in
                guard let to = copy.baseAddress, let from = layer.baseAddress else { return }
                to.update(from: from, count: min(copy.count, layer.count))
            }
        }
        let packet = try encode(input, layer: layer, overlay: overlay, volume: settings.volume, state: &state, with: encoder)
        rendered += 1
        return packet
    }

    /// The live state, to put back with `restore` if frames rendered again are not used.
    func save() -> Saved {
        var bytes: OpusEncoderSnapshot?
        if let encoder {
            var copy = OpusEncoderSnapshot()
            encoder.save(into: &copy)
            bytes = copy
        }
        return Saved(state: state, encoderState: bytes)
    }

    func restore(_ saved: Saved) {
        state = saved.state
        if let bytes = saved.encoderState { encoder?.restore(from: bytes) }
    }

    /// Renders the frames from `first` to the last one rendered again with `settings`, from the
    /// states they were first rendered from. Nil when that is not possible (a frame not kept). The live state is then the new last frame's: `commit`
    /// the result once its packets replace the old ones, or `restore` what `save` returned.
    func renderAgain(from first: UInt64, settings: RenderSettings) throws -> Again? {
        guard let slots = keptSlots(first..<rendered), let encoder else { return nil }
        var state = kept[slots[0]].state
        encoder.restore(from: kept[slots[0]].encoderState)
        var packets: [[UInt8]] = []
        var states: [(state: State, encoderState: OpusEncoderSnapshot)] = []
        for (index, slot) in slots.enumerated() {
            if index > 0 {
                var bytes = OpusEncoderSnapshot()
                encoder.save(into: &bytes)
                states.append((state, bytes))
            }
            apply(settings, to: &state)
            let frame = kept[slot]
            packets.append(
                try frame.input.withUnsafeBufferPointer { input in
                    try frame.layer.withUnsafeBufferPointer { layer in
                        try encode(
                            input, layer: frame.hasLayer ? layer : nil, overlay: frame.overlay, volume: settings.volume,
                            state: &state, with: encoder)
                    }
                })
        }
        self.state = state
        return Again(first: first, packets: packets, kept: states, settings: settings)
    }

    /// Whether any of the frames numbered `run` was rendered with other settings.
    func differs(from settings: RenderSettings, in run: Range<UInt64>) -> Bool {
        keptSlots(run)?.contains { kept[$0].settings != settings } ?? false
    }

    /// Where the frames numbered `run` are kept; nil unless every one of them is.
    private func keptSlots(_ run: Range<UInt64>) -> [Int]? {
        guard !run.isEmpty, run.upperBound <= rendered, run.count <= kept.count else { return nil }
        let slots = run.map { Int($0 % UInt64(kept.count)) }
        guard zip(slots, run).allSatisfy({ kept[$0.0].sequence == $0.1 }) else { return nil }
        return slots
    }

    /// The frames rendered again replaced the old ones in the outbox: they are what is kept now.
    func commit(_ again: Again) {
        for offset in 0..<Int(rendered - again.first) {
            let slot = Int((again.first + UInt64(offset)) % UInt64(kept.count))
            kept[slot].settings = again.settings
            if offset > 0 {
                kept[slot].state = again.kept[offset - 1].state
                kept[slot].encoderState = again.kept[offset - 1].encoderState
            }
        }
    }

    private func apply(_ settings: RenderSettings, to state: inout State) {
        state.filterChain.set(settings.filters)
        // Turned off, the normaliser glides the gain back to 0 dB and crossfades its limiter's
        // delay away before it goes (no jump, no click).
        if state.normalizer?.isFinished == true { state.normalizer = nil }
        if !settings.normalize {
            state.normalizer?.stopping = true
        } else if state.normalizer != nil {
            state.normalizer?.stopping = false
        } else if LoudnessNormalizer.isNeeded(taggedLoudness: taggedLoudness, target: loudnessTarget) {
            // A track whose tag puts it within 0.5 LU of the target needs nothing.
            state.normalizer = LoudnessNormalizer(target: loudnessTarget, taggedLoudness: taggedLoudness, midStream: state.heard)
        }
    }

    /// Normalises, ducks the track and mixes the layers in (before the normaliser's limiter, so
    /// the sum keeps under its ceiling), filters, ramps the gain over the frame to `volume` and
    /// encodes.
    private func encode(
        _ input: UnsafeBufferPointer<Float>, layer: UnsafeBufferPointer<Float>?, overlay: Overlay, volume: Int,
        state: inout State, with encoder: OpusEncoder
    ) throws -> [UInt8] {
        if pcm.count != OpusEncoder.frameFloats { pcm = [Float](repeating: 0, count: OpusEncoder.frameFloats) }
        pcm.withUnsafeMutableBufferPointer { out in
            guard let to = out.baseAddress, let from = input.baseAddress else { return }
            to.update(from: from, count: min(out.count, input.count))
        }
        var ducking = state.ducking
        let mix = { (samples: UnsafeMutableBufferPointer<Float>) in
            ducking.process(samples, overlay)
            guard let layer else { return }
            for i in 0..<min(samples.count, layer.count) { samples[i] += layer[i] }
        }
        if state.normalizer != nil {
            pcm.withUnsafeMutableBufferPointer { state.normalizer?.process($0, beforeLimiting: mix) }
        } else {
            pcm.withUnsafeMutableBufferPointer { mix($0) }
        }
        state.ducking = ducking
        pcm.withUnsafeMutableBufferPointer { state.filterChain.process($0) }
        let target = Float(volume) / 100
        if state.gain != 1 || target != 1 {
            let start = state.gain
            let step = (target - start) / Float(OpusEncoder.samplesPerFrame)
            pcm.withUnsafeMutableBufferPointer { samples in
                for i in 0..<OpusEncoder.samplesPerFrame {
                    let g = start + step * Float(i + 1)
                    samples[2 * i] *= g
                    samples[2 * i + 1] *= g
                }
            }
            state.gain = target
        }
        state.heard = true
        if let render { encoder.setComplexity(render.complexity) }
        let started = ContinuousClock.now
        defer { encodeTime?.recordNanoseconds(Self.nanoseconds(ContinuousClock.now - started)) }
        return try pcm.withUnsafeBufferPointer { try encoder.encode($0) { Array($0) } }
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }
}
