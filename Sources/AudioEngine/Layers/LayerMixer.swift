// A play's layers on the worker's side: each one's source opened beside the track (any source a
// play takes), read 20 ms at a time, scaled to its level and summed into one frame that the
// renderer mixes into the track's frame before the one encoder. A layer whose network is behind
// is silent for that frame and carries on where it was: it never holds the track up.
import EngineAPI
import ServiceSupport
import WireProtocol

/// A layer asked for, as the play's machine keeps it until it ends.
struct LayerAsk: Sendable {
    let layerID: UInt64
    let url: String
    /// nil while a page URL is being resolved.
    var source: ResolvedSource?
    /// The layer's level in percent.
    let volume: Int
    let duckDB: Double
    let attackMS: Int
    let releaseMS: Int
    /// Fires when the layer is no longer wanted (ended, or its play did): its page resolution stops.
    let cancellation = CancellationSignal()
}

/// Owned by the play's worker: it lives across the track's joins, so a layer sounds on over the
/// next track.
final class LayerMixer {
    private struct Open {
        let ask: LayerAsk
        let pipeline: Pipeline
        /// Its first samples have gone into a frame.
        var started = false
    }

    /// What became of the layers in the last frame: `layer_started` goes before it, `layer_ended` after.
    struct Changes {
        var started: [UInt64] = []
        var ended: [(layerID: UInt64, reason: FinishReason, error: APIError?)] = []
        var isEmpty: Bool { started.isEmpty && ended.isEmpty }
    }

    private var open: [Open] = []
    /// The sum of the layers' samples for the frame being made, and one layer's on its way there.
    private(set) var frame: [Float] = []
    private var scratch: [Float] = []
    /// The last frame's overlay: its depth and release stay after the last layer ended, so the
    /// track comes back at that layer's pace.
    private(set) var overlay = Overlay.none
    private(set) var changes = Changes()

    /// A layer's source is open and may sound in the next frame (the track cannot pass through).
    var isSounding: Bool { open.contains { $0.pipeline.isReady } }

    var isEmpty: Bool { open.isEmpty }

    /// Opens the layers asked for that are not open yet and drops those no longer asked for.
    /// Those that cannot be opened end at once (in `changes`).
    func sync(with asks: [LayerAsk], context: PlaybackWorker.Context, loudnessTarget: Double) {
        let asked = Set(asks.map(\.layerID))
        open.removeAll { !asked.contains($0.ask.layerID) }
        for ask in asks where ask.source != nil && !open.contains(where: { $0.ask.layerID == ask.layerID }) {
            guard let source = ask.source else { continue }
            guard !changes.ended.contains(where: { $0.layerID == ask.layerID }) else { continue }
            do {
                let pipeline = try Pipeline(
                    source: source, encoder: context.encoder, loudnessTarget: loudnessTarget, lead: 1,
                    metrics: context.metrics, network: context.network)
                open.append(Open(ask: ask, pipeline: pipeline))
            } catch {
                changes.ended.append((ask.layerID, .error, APIError.wrap(error)))
            }
        }
        for index in open.indices.reversed() where !open[index].pipeline.isReady {
            do {
                _ = try open[index].pipeline.open()
            } catch {
                changes.ended.append((open[index].ask.layerID, .error, APIError.wrap(error)))
                open.remove(at: index)
            }
        }
    }

    /// Closes every layer's source (the play is over): a network layer's read-ahead thread ends here.
    func close() { open.removeAll() }

    /// The changes were pushed with their frame.
    func clearChanges() { changes = Changes() }

    /// The layers that started were pushed before their frame.
    func clearStarted() { changes.started = [] }

    /// Reads the next 20 ms of every open layer into `frame`, each at its level; the overlay says
    /// whether any sounded. A layer that ran out or failed ends here (in `changes`).
    func mixNextFrame() -> Overlay {
        let needed = OpusEncoder.frameFloats
        if frame.count != needed { frame = [Float](repeating: 0, count: needed) }
        if scratch.count != needed { scratch = [Float](repeating: 0, count: needed) }
        frame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
        var sounding = false
        var depth: Float = 0
        var attack = overlay.attackMS
        var release = overlay.releaseMS
        var index = 0
        while index < open.count {
            let layer = open[index]
            let valid: Int
            do {
                switch try layer.pipeline.readOwnFrame(into: &scratch) {
                case .pending:
                    // Its network is behind (or it is still opening): silent this frame.
                    index += 1
                    continue
                case .end: valid = 0
                case .value(let count): valid = count
                }
            } catch {
                changes.ended.append((layer.ask.layerID, .error, APIError.wrap(error)))
                open.remove(at: index)
                continue
            }
            if valid > 0 {
                if !layer.started {
                    open[index].started = true
                    changes.started.append(layer.ask.layerID)
                }
                let gain = Float(layer.ask.volume) / 100
                frame.withUnsafeMutableBufferPointer { sum in
                    scratch.withUnsafeBufferPointer { samples in
                        for i in 0..<min(valid, needed) { sum[i] += gain * samples[i] }
                    }
                }
                sounding = true
                let duck = Float(layer.ask.duckDB)
                if duck >= depth {
                    depth = duck
                    attack = layer.ask.attackMS
                    release = layer.ask.releaseMS
                }
            }
            if valid < needed {
                changes.ended.append((layer.ask.layerID, .finished, nil))
                open.remove(at: index)
                continue
            }
            index += 1
        }
        overlay = Overlay(sounding: sounding, depthDB: sounding ? depth : overlay.depthDB, attackMS: attack, releaseMS: release)
        return overlay
    }
}
