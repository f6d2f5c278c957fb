// Who gets a core first, read from the kernel: the running engine's pacer thread is real-time
// where the system allows it (as its log says) and its encoding workers run at a higher nice
// value; both settings can be turned off.
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
