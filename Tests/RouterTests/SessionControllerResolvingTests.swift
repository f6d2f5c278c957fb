// A `play` or `queue` whose URL is slow to resolve: answered at once with the URL under
// `resolving`, resolved one at a time per session, its outcome told to every client, and called
// off (the engine's request ended) when a newer command makes it pointless.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import NIOConcurrencyHelpers
import Testing
import TestSupport
import WireProtocol

@testable import TonearmRouter

@Suite struct SessionControllerResolvingTests {
    let id = try! SessionID("guild-1")
    static let quickAnswer: Duration = .milliseconds(50)

    /// What a controller broadcast to its clients.
    final class Broadcasts: Sendable {
        private let messages = NIOLockedValueBox<[String]>([])
        func append(_ json: String) { messages.withLockedValue { $0.append(json) } }
        private var objects: [[String: Any]] {
            messages.withLockedValue { $0 }.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        }
        var errors: [[String: Any]] { objects.filter { $0["type"] as? String == "error" } }
        var states: [[String: Any]] { objects.filter { $0["type"] as? String == "state" } }
    }

    func controller(_ engine: ScriptedEngine) -> (SessionController, Broadcasts) {
        let broadcasts = Broadcasts()
        let sink = SessionSink(broadcast: { _, json in broadcasts.append(json) }, persist: { _, _ in })
        return (SessionController(id: id, engine: engine, sink: sink, quickAnswer: Self.quickAnswer), broadcasts)
    }

    @Test func aSlowPlayIsAnsweredAtOnceWithItsURLResolvingAndPlaysWhenResolved() async throws {
        let engine = ScriptedEngine()
        let (controller, broadcasts) = controller(engine)
        engine.hold("slow.mp3")
        let answered = try await controller.perform(.play(url: "slow.mp3"))
        #expect(answered.resolving == [PendingTrack(url: "slow.mp3", command: "play")])
        #expect(answered.status == "idle" && answered.queue.isEmpty && engine.plays.isEmpty)
        #expect(broadcasts.states.last?["resolving"] as? [[String: String]] == [["url": "slow.mp3", "command": "play"]])
        #expect(engine.resolves == ["slow.mp3 for guild-1"], "resolved for its session")

        engine.release("slow.mp3")
        #expect(await eventually { engine.plays == ["play slow.mp3"] })
        let state = await controller.state
        #expect(state.resolving.isEmpty && state.queue.map(\.url) == ["slow.mp3"] && state.status == "starting")
        #expect(broadcasts.errors.isEmpty)
    }

    /// The caller had its answer: the failure goes to every client, naming the URL, and the state
    /// no longer lists it.
    @Test func aFailureAfterTheAnswerIsToldToEveryClientWithItsURL() async throws {
        let engine = ScriptedEngine()
        let (controller, broadcasts) = controller(engine)
        engine.hold("bad-later")
        _ = try await controller.perform(.enqueue(url: "bad-later"))
        engine.release("bad-later")
        #expect(await eventually { !broadcasts.errors.isEmpty })
        let error = try #require(broadcasts.errors.first)
        #expect(error["code"] as? String == "unresolvable" && error["url"] as? String == "bad-later", "\(error)")
        #expect(error["session_id"] as? String == "guild-1")
        #expect((broadcasts.states.last?["resolving"] as? [Any])?.isEmpty == true)
        #expect(await controller.state.queue.isEmpty)
    }

    /// A failure within the quick answer is the command's own answer, as before: nothing else.
    @Test func aQuickFailureIsTheCommandsAnswer() async throws {
        let engine = ScriptedEngine()
        let (controller, broadcasts) = controller(engine)
        let error = await #expect(throws: APIError.self) { try await controller.perform(.play(url: "bad-now")) }
        #expect(error?.code == "unresolvable")
        #expect(broadcasts.errors.isEmpty)
    }

    /// Stop makes a play still resolving pointless: its request to the engine ends at once (the
    /// engine frees what it holds for it), nothing plays, and nothing is reported as an error.
    @Test func stopCallsOffAPlayStillResolving() async throws {
        let engine = ScriptedEngine()
        let (controller, broadcasts) = controller(engine)
        engine.hold("dribbling.mp3")
        _ = try await controller.perform(.play(url: "dribbling.mp3"))
        let stopped = try await controller.perform(.stop)
        #expect(stopped.resolving.isEmpty)
        #expect(await eventually { engine.calls.contains("called off dribbling.mp3") }, "\(engine.calls)")
        #expect(engine.plays.isEmpty && broadcasts.errors.isEmpty)
        #expect(await controller.isIdle)
    }

    /// A newer play calls off the older one, so only the last click plays, whichever resolves first.
    @Test func aNewerPlayCallsOffTheOlderOne() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        engine.hold("first.mp3")
        _ = try await controller.perform(.play(url: "first.mp3"))
        _ = try await controller.perform(.play(url: "second.mp3"))
        #expect(await eventually { engine.plays == ["play second.mp3"] })
        #expect(await eventually { engine.calls.contains("called off first.mp3") })
        #expect(await controller.state.queue.map(\.url) == ["second.mp3"])
    }

    /// One lookup at a time per session, in the order the commands came; a play goes before the
    /// queued tracks still waiting. Each lands where its command put it; the queued tracks
    /// resolved after the play do not start (the play chose what plays).
    @Test func lookupsRunOneAtATimeWithPlaysFirst() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        for url in ["a.mp3", "b.mp3", "c.mp3"] { engine.hold(url) }
        _ = try await controller.perform(.enqueue(url: "a.mp3"))
        _ = try await controller.perform(.enqueue(url: "b.mp3"))
        let state = try await controller.perform(.play(url: "c.mp3"))
        #expect(state.resolving.map(\.url) == ["a.mp3", "c.mp3", "b.mp3"])
        #expect(engine.resolves == ["a.mp3 for guild-1"], "one at a time")
        engine.release("a.mp3")
        await engine.waitUntilHeld("c.mp3")
        #expect(engine.resolves.count == 2)
        engine.release("c.mp3")
        await engine.waitUntilHeld("b.mp3")
        engine.release("b.mp3")
        #expect(await eventually { await controller.state.resolving.isEmpty })
        let queue = await controller.state.queue.map(\.url)
        #expect(queue == ["a.mp3", "c.mp3", "b.mp3"], "\(queue)")
        #expect(engine.plays == ["play c.mp3"])
    }

    @Test func aSessionWaitsForAtMostThirtyTwoURLs() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        for n in 0..<SessionController.maxLookups {
            engine.hold("t\(n).mp3")
            _ = try await controller.perform(.enqueue(url: "t\(n).mp3"))
        }
        engine.hold("one-more.mp3")
        let error = await #expect(throws: APIError.self) { try await controller.perform(.enqueue(url: "one-more.mp3")) }
        #expect(error?.status == .tooManyRequests && error?.code == "too_many_pending" && error?.retryAfterSeconds == 5)
        // Clear calls every one off.
        _ = try await controller.perform(.clear)
        #expect(await controller.state.resolving.isEmpty)
        #expect(await eventually { engine.calls.contains("called off t0.mp3") })
    }
}
