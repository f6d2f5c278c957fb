// A cluster pair's fence (`PUT /fence`): the engine plays only the sessions its Router's last
// fence names, and nothing once that fence's time has run out, whatever the Router asks late.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import TestSupport
import Testing
import WireProtocol

@testable import AudioEngine

@Suite struct FenceTests {
    func fence(_ sessions: [String], version: UInt64, validMS: Int64 = 10_000, holder: String = "router-a") throws -> Fence {
        Fence(holder: holder, version: version, validMS: validMS, sessions: try sessions.map { try SessionID($0) })
    }

    /// The `finished` events of `id` the driver has read, with their codes.
    func finishedCodes(_ driver: TickDriver, _ id: String) -> [String?] {
        driver.messages.compactMap {
            guard case .event(let event, _) = $0, event.type == .finished, event.sessionID.description == id else { return nil }
            return event.code
        }
    }

    func frames(_ driver: TickDriver, _ id: String) -> Int {
        driver.messages.filter { if case .audio(let packet) = $0 { packet.sessionID.description == id } else { false } }.count
    }

    @Test func aSessionTheFenceLeavesOutStopsAtOnceAndMayNotStartAgain() throws {
        let driver = try TickDriver()
        let (kept, left) = (try SessionID("kept"), try SessionID("left"))
        _ = try driver.manager.setFence(try fence(["kept", "left"], version: 1))
        _ = try driver.manager.play(sessionID: kept, url: "tone-440.mp3")
        _ = try driver.manager.play(sessionID: left, url: "tone-440.mp3")
        try driver.tick(until: { frames(driver, "left") > 3 && frames(driver, "kept") > 3 })

        let state = try driver.manager.setFence(try fence(["kept"], version: 2))
        #expect(state.applied && state.stopped == 1 && state.sessions == 1)
        let before = frames(driver, "left")
        try driver.tick(5)
        #expect(finishedCodes(driver, "left") == ["fenced"])
        #expect(frames(driver, "left") == before, "a session left out sent frames after its fence")
        #expect(frames(driver, "kept") > 5)
        #expect(finishedCodes(driver, "kept").isEmpty)
        // A play asked for late (a Router's command in flight) is refused.
        #expect(throws: APIError.self) { try driver.manager.play(sessionID: left, url: "tone-440.mp3") }
        do {
            _ = try driver.manager.play(sessionID: left, url: "tone-440.mp3")
        } catch {
            #expect(error.code == "fenced" && error.status == .conflict)
        }
    }

    @Test func everyPlayStopsOnTheTickTheFenceRunsOut() throws {
        let driver = try TickDriver()
        // Long enough to be playing still when the fence runs out.
        try MediaFixture.tone(550, seconds: 10, into: driver.directory.path)
        let ids = try ["a", "b"].map { try SessionID($0) }
        _ = try driver.manager.setFence(try fence(["a", "b"], version: 1, validMS: 300))
        for id in ids { _ = try driver.manager.play(sessionID: id, url: "tone-550.mp3") }
        try driver.tick(until: { frames(driver, "a") > 0 && frames(driver, "b") > 0 })
        let ranOut = ContinuousClock.now + .milliseconds(300)
        try driver.tick(until: { ContinuousClock.now > ranOut + .milliseconds(20) })
        try driver.tick(2)
        #expect(finishedCodes(driver, "a") == ["fenced"] && finishedCodes(driver, "b") == ["fenced"])
        let (a, b) = (frames(driver, "a"), frames(driver, "b"))
        try driver.tick(5)
        #expect(frames(driver, "a") == a && frames(driver, "b") == b, "frames after the fence ran out")
        #expect(driver.manager.fenceState.remainingMS == 0 && driver.manager.fenceState.stopped == 2)
        #expect(throws: APIError.self) { try driver.manager.play(sessionID: ids[0], url: "tone-440.mp3") }
        // A renewal's fence lets them play again.
        _ = try driver.manager.setFence(try fence(["a"], version: 2))
        _ = try driver.manager.play(sessionID: ids[0], url: "tone-440.mp3")
    }

    @Test func anOlderFenceDeliveredLateIsIgnoredAndANewHolderReplacesIt() throws {
        let driver = try TickDriver()
        #expect(try driver.manager.setFence(try fence(["a"], version: 5)).applied)
        let late = try driver.manager.setFence(try fence(["a", "b"], version: 4))
        #expect(!late.applied && late.version == 5 && late.sessions == 1)
        #expect(throws: APIError.self) { try driver.manager.play(sessionID: try SessionID("b"), url: "tone-440.mp3") }
        // A Router started again counts from 1 under a new name.
        #expect(try driver.manager.setFence(try fence(["b"], version: 1, holder: "router-b")).applied)
        _ = try driver.manager.play(sessionID: try SessionID("b"), url: "tone-440.mp3")
    }

    @Test func anEngineNeverFencedPlaysAnythingAndABadFenceIsRefused() throws {
        let driver = try TickDriver()
        #expect(!driver.manager.fenceState.applied)
        _ = try driver.manager.play(sessionID: try SessionID("free"), url: "tone-440.mp3")
        #expect(throws: APIError.self) { try driver.manager.setFence(try fence(["a"], version: 1, validMS: -1)) }
        #expect(throws: APIError.self) { try driver.manager.setFence(try fence(["a"], version: 1, holder: "")) }
        #expect(throws: APIError.self) { try driver.manager.setFence(try fence(["a"], version: 1, holder: String(repeating: "h", count: 65))) }
        // 64 characters of two bytes each: valid by the OpenAPI document's maxLength (schemathesis, seed 1).
        #expect(Fence(holder: String(repeating: "é", count: 64), version: 1, validMS: 1, sessions: []).problem == nil)
        #expect(throws: APIError.self) { try driver.manager.setFence(try fence(["a"], version: Fence.maxVersion + 1)) }
        #expect(!driver.manager.fenceState.applied)
    }
}
