// libFuzzer target: what a client sends the Router. Each line of the input is one WebSocket
// message (or a REST body): its envelope, its command and arguments are parsed as the Router
// parses them, and every accepted command drives a session's queue (the SessionQueue state
// machine) as the controller would, with the engine's `ready`/`finished` answers in between.
// Any message must end in a command or a typed refusal whose reply encodes; the queue must stay
// consistent (its current index inside it, at most `maxQueueLength` tracks). The same lines are
// also tried as session ids from a path and a query, and as identity tokens.
import Foundation
import ServiceSupport
import WireProtocol

@testable import TonearmRouter
import CFuzzDriver

let tokens = IdentityTokens(secret: Data(repeating: 7, count: 32))

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCommands(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    var queue = SessionQueue()
    var shuffles: UInt64 = 0
    for (step, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
        let data = Data(line)
        var reply = CommandReply(id: nil)
        do {
            let envelope = try CommandParsing.envelope(data)
            reply.id = envelope.id
            let command = try CommandParsing.command(envelope.op, arguments: CommandParsing.arguments(data))
            if let input = queueInput(command, queue: queue, shuffles: &shuffles) {
                _ = queue.handle(input)
            }
            reply.ok = true
        } catch {
            reply.error = ErrorBody(code: error.code, message: error.message).error
        }
        precondition(!reply.json().isEmpty, "a reply that does not encode")
        // The engine answers now and then: the play is ready, or it ended one way or another.
        if step % 2 == 1, let last = line.last {
            switch last % 4 {
            case 0: _ = queue.handle(.ready(generation: queue.generation, title: "t", durationMS: Int64(last) * 1_000))
            case 1: _ = queue.handle(.finished(generation: queue.generation, reason: .finished))
            case 2: _ = queue.handle(.finished(generation: queue.generation, reason: .error))
            default: _ = queue.handle(.finished(generation: queue.generation &- 1, reason: .finished))
            }
        }
        precondition(queue.tracks.count <= SessionController.maxQueueLength, "the queue outgrew its cap")
        if let current = queue.current { precondition(queue.tracks.indices.contains(current), "current \(current) outside the queue") }
        let text = String(decoding: line, as: UTF8.self)
        _ = try? RouterApplication.sessionID(path: text)
        _ = try? RouterApplication.sessionID(query: text)
        if let id = tokens.verify(text) { preconditionFailure("a forged token was accepted for \(id)") }
    }
    return 0
}

/// The queue input the controller makes of a command (after the engine has resolved a URL to
/// one track); nil for the commands that do not change the queue.
func queueInput(_ command: SessionCommand, queue: SessionQueue, shuffles: inout UInt64) -> SessionQueue.Input? {
    let room = SessionController.maxQueueLength - queue.tracks.count
    switch command {
    case .play(let url): return room > 0 ? .playNow(Track(url: url)) : nil
    case .enqueue(let url): return room > 0 ? .enqueue([Track(url: url)]) : nil
    case .remove(let index): return .remove(index: index)
    case .clear: return .clear
    case .jump(let index): return .jump(index: index)
    case .next: return .next
    case .previous: return .previous(positionMS: 5_000)
    case .pause: return .pause
    case .resume: return .resume
    case .stop: return .stop
    case .loop(let mode): return .setLoop(mode)
    case .shuffle:
        shuffles &+= 1
        return .shuffle(seed: shuffles)
    // The rest only reach the engine (seek, volume, filters, …), or a station. `default` so that a
    // new command does not break this target's build, which only `.ci/run` makes (it did twice).
    default: return nil
    }
}

// libFuzzer runs from here: `FuzzCommands CORPUS_DIR… [-flags]`, or with a file to replay it.
exit(tonearm_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv))
