// Who gets a core first, read from the kernel: the running engine's pacer thread is real-time
// where the system allows it (as its log says) and its encoding workers run at a higher nice
// value; both settings can be turned off. And when the whole engine is held up for a moment,
// the stream keeps its time.
import Foundation
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(2))) struct SchedulingEndToEndTests {
    /// The engine's threads by name: (nice value, scheduling policy) from /proc.
    private static func threads(of pid: Int32) throws -> [(name: String, nice: Int, policy: Int)] {
        let tasks = "/proc/\(pid)/task"
        return try FileManager.default.contentsOfDirectory(atPath: tasks).compactMap { task in
            guard let name = try? String(contentsOfFile: "\(tasks)/\(task)/comm", encoding: .utf8),
                let stat = try? String(contentsOfFile: "\(tasks)/\(task)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // After "pid (comm) ": state is field 3, nice field 19, policy field 41.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 38, let nice = Int(fields[16]), let policy = Int(fields[38]) else { return nil }
            return (name.trimmingCharacters(in: .whitespacesAndNewlines), nice, policy)
        }
    }

    private func playing(_ harness: EngineHarness) async throws -> Int32 {
        try MediaFixture.tone(440, seconds: 10, into: harness.media)
        let socket = try await harness.start()
        #expect(try await harness.post("/session/s/play", #"{"url":"tone-440.mp3"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("s").count >= 25 })
        return try #require(harness.engine?.pid)
    }

    @Test func thePacerComesFirstAndTheWorkersLast() async throws {
        let harness = try EngineHarness()
        defer { Task { await harness.stop() } }
        let pid = try await playing(harness)
        let threads = try Self.threads(of: pid)
        let log = harness.engine?.log ?? ""
        // The pacer, and the event loop it hands each tick's batch to.
        for name in ["tonearm-pacer", "tonearm-socket"] {
            let thread = try #require(threads.first { $0.name == name }, "threads: \(threads)")
            if log.contains("\(name) thread at SCHED_FIFO") {
                #expect(thread.policy == Int(SCHED_FIFO))
            } else {
                // Without CAP_SYS_NICE or an rtprio limit: said in the log, normal scheduling.
                #expect(log.contains("\(name) thread at normal scheduling: SCHED_FIFO was refused"), "\(log)")
                #expect(thread.policy == Int(SCHED_OTHER))
            }
            #expect(thread.nice == 0)
        }
        let workers = threads.filter { $0.name == "tonearm-worker" }
        #expect(!workers.isEmpty, "threads: \(threads)")
        #expect(workers.allSatisfy { $0.nice == 10 })
    }

    @Test func aStreamKeepsItsTimeThroughAShortStallOfTheWholeEngine() async throws {
        let harness = try EngineHarness()
        defer { Task { await harness.stop() } }
        // An Opus source passed through keeps 10 frames ahead, so the frames a stall held back
        // are there to send once it ends.
        let wave = "0.3*sin(2*PI*523.25*t)"
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=30", "-c:a", "libopus", "-b:a", "128k",
            "-frame_duration", "20", harness.media + "/tone.webm",
        ])
        let socket = try await harness.start()
        #expect(try await harness.post("/session/s/play", #"{"url":"tone.webm","normalize":false}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("s").count >= 100 })
        let pid = try #require(harness.engine?.pid)
        // Three times, 2 s apart: the engine stopped for 50 ms (2–3 deadlines pass meanwhile).
        let start = ContinuousClock.now
        for _ in 0..<3 {
            try await observe(for: .seconds(2))
            kill(pid, SIGSTOP)
            usleep(50_000)
            kill(pid, SIGCONT)
        }
        try await observe(for: .seconds(2))
        let frames = socket.packets("s").filter { $0.at >= start }
        let first = try #require(frames.first?.at), last = try #require(frames.last?.at)
        // Where the last frame arrived against where 20 ms a frame after the first puts it: a
        // skipped deadline would put it 20 ms later for each.
        let behind = (last - first) - .milliseconds(20) * (frames.count - 1)
        #expect(behind < .milliseconds(10) && behind > .milliseconds(-10), "\(frames.count) frames, the last \(behind) off its time")
        let frameCounts = try await harness.get("/health").json["frames"] as? [String: Any]
        #expect(frameCounts?["deficit"] as? Int == 0, "\(frameCounts ?? [:])")
        let metrics = try await HTTPClientText.get(harness.url + "/metrics")
        let caughtUp = metrics.split(separator: "\n").first { $0.hasPrefix("tonearm_engine_ticks_caught_up_total ") }
        #expect(caughtUp.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0 >= 3, "the stalls were made up: \(caughtUp ?? "")")
    }

    @Test func bothCanBeTurnedOff() async throws {
        let harness = try EngineHarness(environment: ["TONEARM_PACER_PRIORITY": "0", "TONEARM_WORKER_NICE": "0"])
        defer { Task { await harness.stop() } }
        let pid = try await playing(harness)
        let threads = try Self.threads(of: pid)
        for name in ["tonearm-pacer", "tonearm-socket"] {
            let thread = try #require(threads.first { $0.name == name }, "threads: \(threads)")
            #expect(thread.policy == Int(SCHED_OTHER))
        }
        #expect(threads.allSatisfy { $0.nice <= 0 }, "threads: \(threads)")
        #expect(harness.engine?.log.contains("TONEARM_PACER_PRIORITY=0") == true)
    }
}
