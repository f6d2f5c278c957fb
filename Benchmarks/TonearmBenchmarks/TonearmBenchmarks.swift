// The hot paths of one frame, measured in isolation: the wire format in both directions, one Opus
// encode, the filters on one frame, one pacer tick over N sessions, one Router publish to N subscribers. Each reports wall
// time and allocations. Run with `make bench-micro` (a release build through package-benchmark).
import AudioEngine
import Benchmark
import EngineAPI
import Foundation
import Logging
import NIOCore
import NIOPosix
import TonearmRouter
import TestSupport
import WireProtocol

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal, .throughput],
        timeUnits: .nanoseconds,
        warmupIterations: 10,
        maxDuration: .seconds(2),
        maxIterations: 1_000_000
    )

    // A 160-byte payload: one 20 ms Opus frame at 64 kbit/s; 128 kbit/s frames are about 320.
    let sessionID = try! SessionID("guild-123456789012345678")
    let payload = [UInt8]((0..<320).map { UInt8(truncatingIfNeeded: $0 &* 31) })

    // Per-frame figures run 1,000 frames per sample and report the time of one.
    let perFrame = Benchmark.Configuration(scalingFactor: .kilo)

    Benchmark("wire: encode one audio packet", configuration: perFrame) { benchmark in
        var buffer = ByteBufferAllocator().buffer(capacity: 1_024)
        for _ in benchmark.scaledIterations {
            buffer.clear()
            try! buffer.writeAudioPacket(sessionID: sessionID, payload: payload)
            blackHole(buffer.readableBytes)
        }
    }

    Benchmark("wire: decode one audio packet", configuration: perFrame) { benchmark in
        var encoded = ByteBufferAllocator().buffer(capacity: 1_024)
        try! encoded.writeAudioPacket(sessionID: sessionID, payload: payload)
        var decoder = WireMessageDecoder()
        for _ in benchmark.scaledIterations {
            var input = encoded
            blackHole(try! decoder.decode(buffer: &input))
        }
    }

    Benchmark(
        "opus: encode one 20 ms stereo frame (128 kbit/s, complexity 10)",
        configuration: .init(scalingFactor: .kilo)
    ) { benchmark in
        let encoder = try! OpusEncoder()
        let music = MusicLikePCM(seconds: 1)
        var frame = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            music.frame(frame) { pcm in
                blackHole(try! encoder.encode(pcm) { $0.count })
            }
            frame += 1
        }
    }

    // What keeping a frame so it can be rendered again adds to its encode: libopus's state copied
    // aside, its all-zero blocks left out (docs/benchmarks.md: control latency), taken from an
    // encoder that has encoded a second of music (a fresh one is almost all zero).
    Benchmark("opus: keep the encoder's state for one frame", configuration: perFrame) { benchmark in
        let encoder = try! OpusEncoder()
        let music = MusicLikePCM(seconds: 1)
        for frame in 0..<50 { music.frame(frame) { pcm in blackHole(try! encoder.encode(pcm) { $0.count }) } }
        var state = OpusEncoderSnapshot()
        encoder.save(into: &state)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            encoder.save(into: &state)
            blackHole(state.keptBytes)
        }
    }

    // The filters' cost per frame, beside the encode above (docs/benchmarks.md: filters).
    let filterCases: [(String, Filters)] = [
        ("equalizer, 5 bands (bass boost)", Filters(equalizer: (0..<5).map { EqualizerBand(band: $0, gain: 0.25 - 0.05 * Double($0)) })),
        ("equalizer, all 15 bands", Filters(equalizer: (0..<15).map { EqualizerBand(band: $0, gain: 0.1) })),
        ("karaoke", Filters(karaoke: Karaoke())),
        ("tremolo", Filters(tremolo: Tremolo())),
        ("vibrato", Filters(vibrato: Vibrato())),
        ("rotation", Filters(rotation: Rotation(rotationHz: 0.2))),
        ("distortion", Filters(distortion: Distortion())),
        ("low-pass", Filters(lowPass: LowPass())),
        ("all eight, 15 bands", Filters(
            equalizer: (0..<15).map { EqualizerBand(band: $0, gain: 0.1) }, karaoke: Karaoke(), tremolo: Tremolo(),
            vibrato: Vibrato(), rotation: Rotation(rotationHz: 0.2), distortion: Distortion(),
            channelMix: ChannelMix(leftToRight: 0.2), lowPass: LowPass())),
    ]
    for (name, filters) in filterCases {
        frameBenchmark("filters: one 20 ms stereo frame through \(name)", configuration: perFrame) {
            var chain = FilterChain()
            chain.set(filters)
            return { chain.process($0) }
        }
    }

    // Loudness normalisation's cost per frame (docs/benchmarks.md: loudness): measuring, the gain
    // and the limiter at the default target (the music is about −10 LUFS: lowered, the limiter
    // idle), and at −5 LUFS (raised about 5 dB: the limiter working on every peak).
    for (name, target) in [("to -14 LUFS (limiter idle)", -14.0), ("to -5 LUFS (limiter working)", -5.0)] {
        frameBenchmark("loudness: one 20 ms stereo frame normalised \(name)", configuration: perFrame) {
            var normalizer = LoudnessNormalizer(target: target, taggedLoudness: nil)
            return { normalizer.process($0) }
        }
    }

    // The timescale's cost per 20 ms of source taken in (docs/benchmarks.md: timescale): each
    // step takes one frame and gives every frame it then can (0.8 at rate 1.25, 0.67 at speed 1.5).
    let timescaleCases: [(String, Timescale)] = [
        ("rate 1.25 (nightcore: resampling only)", Timescale(rate: 1.25)),
        ("speed 1.5 (time-stretching only)", Timescale(speed: 1.5)),
        ("pitch 1.25 (both)", Timescale(pitch: 1.25)),
    ]
    for (name, settings) in timescaleCases {
        frameBenchmark("timescale: one 20 ms stereo frame of source at \(name)", configuration: perFrame) {
            var stage = TimescaleStage(settings)
            return { frame in
                stage.push(UnsafeBufferPointer(frame))
                while stage.pull(into: frame) != nil {}
            }
        }
    }

    for sessions in [60, 500] {
        let fixture = TickFixture(sessions: sessions)
        Benchmark(
            "pacer: one tick over \(sessions) streaming sessions",
            configuration: .init(maxDuration: .seconds(3), maxIterations: 100),
            closure: { benchmark in
                // Let the worker threads refill every session's lead (outside the measurement).
                fixture.waitForRefill()
                benchmark.startMeasurement()
                let frames = fixture.tick()
                benchmark.stopMeasurement()
                if frames != sessions { benchmark.error("tick carried \(frames) of \(sessions) frames") }
            },
            setup: { try fixture.start() },
            teardown: { fixture.stop() })
    }

    for clients in [1, 50, 1_000] {
        let fixture = SinkFixture(clients: clients)
        Benchmark(
            "router: publish one frame to \(clients) WebSocket client(s), until written on their loop",
            configuration: .init(scalingFactor: clients >= 1_000 ? .one : .kilo),
            closure: { benchmark in
                for _ in benchmark.scaledIterations { fixture.publish() }
            },
            setup: { fixture.start() },
            teardown: { fixture.stop() })
    }

    for subscribers in [1, 50, 1_000] {
        let fixture = PublishFixture(subscribers: subscribers)
        Benchmark(
            "router: publish one frame to \(subscribers) stream subscriber(s) (AsyncStream: the HLS segmenter)",
            configuration: .init(scalingFactor: subscribers >= 1_000 ? .one : .kilo),
            closure: { benchmark in
                for _ in benchmark.scaledIterations { fixture.publish() }
            },
            setup: { fixture.start() },
            teardown: { await fixture.stop() })
    }
}

/// A second of music-like audio (a chord with vibrato and noise), 50 frames of interleaved floats.
/// A benchmark of one in-place step over 20 ms frames of music-like stereo PCM; `make` builds the
/// step (with its state) outside the measurement.
func frameBenchmark(
    _ name: String, configuration: Benchmark.Configuration,
    _ make: @escaping @Sendable () -> (UnsafeMutableBufferPointer<Float>) -> Void
) {
    Benchmark(name, configuration: configuration) { benchmark in
        let step = make()
        let music = MusicLikePCM(seconds: 1)
        var frame = [Float](repeating: 0, count: OpusEncoder.frameFloats)
        var index = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            music.frame(index) { pcm in
                frame.withUnsafeMutableBufferPointer { out in
                    _ = out.initialize(from: pcm)
                    step(out)
                }
            }
            blackHole(frame[0])
            index += 1
        }
    }
}

struct MusicLikePCM: Sendable {
    let samples: [Float]

    init(seconds: Int) {
        var generator = SystemRandomNumberGenerator()
        let count = 48_000 * seconds
        var samples = [Float](repeating: 0, count: count * 2)
        for n in 0..<count {
            let t = Float(n) / 48_000
            let vibrato = 1 + 0.01 * sin(2 * .pi * 5 * t)
            let chord = [220, 277.18, 329.63, 440].reduce(Float(0)) { $0 + 0.15 * sin(2 * .pi * Float($1) * vibrato * t) }
            samples[2 * n] = chord + Float.random(in: -0.05...0.05, using: &generator)
            samples[2 * n + 1] = chord * 0.9 + Float.random(in: -0.05...0.05, using: &generator)
        }
        self.samples = samples
    }

    func frame<R>(_ index: Int, _ body: (UnsafeBufferPointer<Float>) -> R) -> R {
        let frames = samples.count / OpusEncoder.frameFloats
        let start = (index % frames) * OpusEncoder.frameFloats
        return samples.withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[start..<start + OpusEncoder.frameFloats])) }
    }
}

/// N sessions streaming a WebM/Opus file through a real `SessionManager` and worker pool; a tick is
/// what the pacer thread does every 20 ms (`collectTick`), without the sleep and the socket write.
final class TickFixture: @unchecked Sendable {
    let sessions: Int
    private var directory: TemporaryDirectory?
    private var workers: NIOThreadPool?
    private var manager: SessionManager?

    init(sessions: Int) { self.sessions = sessions }

    func start() throws {
        let directory = try TemporaryDirectory(prefix: "tonearm-bench")
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=120", "-ac", "2",
            "-c:a", "libopus", "-b:a", "128k", directory.file("tone.webm"),
        ])
        let workers = NIOThreadPool(numberOfThreads: 2)
        workers.start()
        var configuration = PlaybackConfiguration()
        configuration.maxSessions = sessions
        let manager = SessionManager(
            resolver: SourceResolver(
                library: MediaLibrary(directory: directory.path), network: try SourceNetwork(policy: NetworkPolicy()), ytdlp: YTDLP()),
            configuration: configuration, workers: workers, logger: Logger(label: "bench"))
        for index in 0..<sessions {
            _ = try manager.play(sessionID: try SessionID("s\(index)"), url: "tone.webm")
        }
        self.directory = directory
        self.workers = workers
        self.manager = manager
        // Until every session streams: the first ticks carry `ready` events and fewer frames.
        for _ in 0..<500 {
            waitForRefill()
            if tick() == sessions { return }
        }
        throw BenchmarkSetupError("the \(sessions) sessions did not all start streaming")
    }

    func waitForRefill() { Thread.sleep(forTimeInterval: 0.02) }

    /// One tick; returns the audio frames it carried.
    func tick() -> Int {
        var batch = TickBatch()
        manager!.collectTick(into: &batch, lateTicks: 0)
        blackHole(batch.all.readableBytes)
        return batch.frames
    }

    func stop() {
        manager = nil
        try? workers?.syncShutdownGracefully()
        directory = nil
    }
}

/// One session with N subscribers, each drained by its own task as a client connection's writer
/// task drains it in the Router.
final class PublishFixture: @unchecked Sendable {
    let subscribers: Int
    private let store = SessionStore(clientBufferFrames: 50, slowWindowFrames: 250, slowDropLimit: .max)
    private let id = try! SessionID("bench-session")
    private let packet: WireMessage
    private var readers: [Task<Void, Never>] = []

    init(subscribers: Int) {
        self.subscribers = subscribers
        var payload = ByteBufferAllocator().buffer(capacity: 320)
        payload.writeBytes((0..<320).map { UInt8(truncatingIfNeeded: $0) })
        packet = .audio(AudioPacket(sessionID: id, payload: payload))
    }

    func start() {
        store.register(id)
        readers = (0..<subscribers).map { _ in
            let subscription = store.subscribe(id, kind: .bot)
            return Task { for await message in subscription.messages { blackHole(message) } }
        }
    }

    func publish() { store.route(packet) }

    func stop() async {
        store.release(id)
        for reader in readers { reader.cancel() }
        for reader in readers { await reader.value }
        readers = []
    }
}

/// One session with N WebSocket-style clients: sinks on one real event loop that frame each
/// message once per loop and "write" it by counting bytes (no socket, so this is the Router's own
/// cost). A publish is measured until the loop has delivered it to every client.
final class SinkFixture: @unchecked Sendable {
    final class CountingSink: ClientSink, @unchecked Sendable {
        let eventLoop: any EventLoop
        var bytes = 0
        init(eventLoop: any EventLoop) { self.eventLoop = eventLoop }
        func encode(_ message: ClientMessage) -> ByteBuffer { WebSocketWire.frame(message) }
        func deliver(_ bytes: ByteBuffer, audio: Bool) { self.bytes += bytes.readableBytes }
    }

    let clients: Int
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let store = SessionStore()
    private let id = try! SessionID("bench-session")
    private let packet: WireMessage
    private var tokens: [UInt64] = []

    init(clients: Int) {
        self.clients = clients
        var payload = ByteBufferAllocator().buffer(capacity: 320)
        payload.writeBytes((0..<320).map { UInt8(truncatingIfNeeded: $0) })
        packet = .audio(AudioPacket(sessionID: id, payload: payload))
    }

    func start() {
        store.register(id)
        let loop = group.next()
        tokens = (0..<clients).map { _ in store.subscribe(id, kind: .bot, sink: CountingSink(eventLoop: loop)) }
    }

    func publish() {
        store.route(packet)
        try! group.next().submit {}.wait()
    }

    func stop() {
        for token in tokens { store.unsubscribe(id, token: token) }
        try? group.syncShutdownGracefully()
    }
}

struct BenchmarkSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
