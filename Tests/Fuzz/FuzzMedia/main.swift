// libFuzzer target: the engine's media path on bytes from anywhere — a user's file or a public URL.
// The input is written to memory (/dev/shm) and opened as a session opens a file: FFmpeg probes
// and demuxes it, and the Pipeline passes Opus through or decodes, resamples to 48 kHz stereo and
// encodes 20 ms Opus frames (12 of them, with a seek after the fourth; packets passed through
// untouched are taken back and decoded at the tenth; the same bytes may follow as the next track,
// joined on the sample or crossfaded over 60 ms, so a hostile end meets a hostile start). Any input must end in
// packets, the end, or an error the session reports — never a trap, a hang or a packet longer
// than the wire carries.
import CFFmpeg
import EngineAPI
import Foundation
import ServiceSupport
import WireProtocol

@testable import AudioEngine
import CFuzzDriver

let path = (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory())
    + "/tonearm-fuzz-media-\(getpid())"

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMedia(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    // FFmpeg's complaints about broken input would flood the log (the engine's first open sets
    // its own level, so this is said again after every run).
    defer { av_log_set_level(AV_LOG_QUIET) }
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { return 0 }
    defer { unlink(path) }
    // The last byte picks the volume, where to seek (as a user might, at any time), by its
    // lowest bit loudness normalisation (on by default; its meter and limiter see every sample)
    // and by the next a timescale from the second frame to the ninth (started, reset by the seek,
    // ended: each hands hostile samples to the stretch's search and back to the plain path).
    let knob = Int(bytes.last ?? 0)
    do {
        // libopus is not what is searched here, and at complexity 10 it would take most of the time.
        var pipeline = try Pipeline(
            source: ResolvedSource(location: path, displayName: "fuzz"), encoder: OpusEncoderConfiguration(complexity: 0))
        if knob & 4 != 0 {
            let next = try Pipeline(
                source: ResolvedSource(location: path, displayName: "fuzz"), encoder: OpusEncoderConfiguration(complexity: 0))
            pipeline.setFollowing(.init(playID: 2, pipeline: next, fadeFloats: knob & 8 != 0 ? 96 * 60 : 0))
        }
        let limit = WireFormat.maxFrameLength - SessionID.wireLength
        // The last two packets that went out untouched: at the tenth frame they are taken back,
        // as a control change does with an Opus source's packets still waiting (their bytes are
        // the source's, decoded here again).
        var untouched: [[UInt8]] = []
        for frame in 0..<12 {
            if frame == 4 { try pipeline.seek(toMS: Int64(knob) * 37) }
            if frame == 10, untouched.count == 2 { try pipeline.takeBack([untouched[1]], after: untouched[0]) }
            let filters = knob & 2 != 0 && (1..<9).contains(frame) ? Filters(timescale: Timescale(speed: 1.5, pitch: 0.8)) : Filters()
            let next = try pipeline.nextPacket(volume: knob * 4, filters: filters, normalize: knob & 1 == 0)
            if case .end = next, let joined = pipeline.handOver() {
                pipeline = joined
                continue
            }
            guard case .value(let packet) = next else { break }
            if pipeline.joinCompleted, let joined = pipeline.handOver() { pipeline = joined }
            precondition(!packet.isEmpty && packet.count <= limit, "a packet of \(packet.count) bytes")
            untouched = pipeline.passthrough ? Array((untouched + [packet]).suffix(2)) : []
        }
    } catch {
        // A refusal (APIError, or the encoder's OpusError): the session gets an error event.
    }
    return 0
}

// libFuzzer runs from here: `FuzzMedia CORPUS_DIR… [-flags]`, or with a file to replay it.
exit(tonearm_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv))
