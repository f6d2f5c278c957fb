// Stations in a cluster: a session of this pair follows a station another pair plays. One
// upstream per station per Router carries the station's packets and events from the Router of
// the pair that plays it into this Router's store, as if its own engine had sent them; the
// store hands them to every follower's clients here (SessionStore+Stations), however many.
//
// The upstream is a WebSocket client of the station like any tab (`/ws`, a token this pair signs
// for it: a cluster's pairs share the token secret), marked as a station relay: the station's
// pair tells it first what the station plays now (its `ready`), refuses it while the station
// follows another (no chains), and refuses the station a `follow` of its own while a relay
// hears it. It follows the station from pair to pair as a relayed client does, and ends once no
// session of this pair has followed the station for `idleGrace`, or when the station comes to
// this pair (its engine then plays it here).
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
import ServiceSupport
import WireProtocol

final class StationRelays: Sendable {
    let relay: ClusterRelay
    let store: SessionStore
    let tokens: IdentityTokens
    let logger: Logger

    /// Marks a station relay's upstream request.
    static let header = HTTPField.Name("X-Tonearm-Station-Relay")!
    /// How long a relay stays with no follower here: a follow about to be made, a follower
    /// taken on again after a move.
    static let idleGrace: Duration = .seconds(5)

    /// What a relay's first connection found.
    enum Outcome: Sendable, Equatable {
        /// It hears the station: its packets come here.
        case connected
        /// The station's pair refused it: close code and reason.
        case refused(UInt16, String)
        /// The station plays on this pair now.
        case local
    }

    private struct Running {
        let first = Eventual<Outcome>()
        /// When a follower here last asked for it.
        var wanted = ContinuousClock.now
    }

    private let running = NIOLockedValueBox<[SessionID: Running]>([:])

    /// The stations relayed to this Router now (`/health`, `/metrics`).
    var count: Int { running.withLockedValue { $0.count } }

    init(relay: ClusterRelay, store: SessionStore, tokens: IdentityTokens, logger: Logger) {
        self.relay = relay
        self.store = store
        self.tokens = tokens
        self.logger = logger
    }

    /// Where `station` plays, for a session of this pair about to follow it: here (`.local`), or
    /// on another pair, whose Router now sends its packets and events here (`.remote`), once for
    /// all its followers on this pair. A station that may not be followed is refused with what
    /// its pair said (409 `station_follows`); one whose pair does not answer within `patience`,
    /// 503 `cluster_unavailable`.
    func attach(_ station: SessionID, patience: Duration = .seconds(10)) async throws(APIError) -> Placement {
        let placement = try await relay.placeWaiting(station)
        guard case .remote(let address) = placement else { return .local }
        store.register(station)
        let (first, start) = running.withLockedValue { running -> (Eventual<Outcome>, Bool) in
            if running[station] != nil {
                running[station]!.wanted = .now
                return (running[station]!.first, false)
            }
            let fresh = Running()
            running[station] = fresh
            return (fresh.first, true)
        }
        if start { Task { await self.run(station, first: address, outcome: first) } }
        switch await first.value(within: patience) {
        case .connected?: return placement
        case .local?: return .local
        case .refused(let code, let reason)?: throw Self.refusal(code, reason, station)
        case nil:
            throw APIError(
                status: .serviceUnavailable, code: "cluster_unavailable",
                message: "the pair that plays \(station) does not answer; try again in a moment", retryAfterSeconds: 1)
        }
    }

    /// A station relay's request, on the station's pair: refused (the station it follows) when
    /// the station follows another; else counted among its followers until `leave`.
    static func join(_ request: Request, _ id: SessionID, store: SessionStore) -> APIError? {
        guard isRelay(request), let further = store.joinRemoteFollowers(id) else { return nil }
        return APIError(
            status: .conflict, code: "station_follows", message: "\(id) follows \(further) itself; follow \(further) instead")
    }

    static func isRelay(_ request: Request) -> Bool {
        request.headers[header] != nil && request.headers[ClusterRelay.forwardedHeader] != nil
    }

    /// What the station's pair said, as the follow's answer: a station that follows is the
    /// follow's conflict (409); any other refusal is the cluster's (503: a token the station's
    /// pair does not take means the pairs do not share TONEARM_TOKEN_SECRET).
    static func refusal(_ code: UInt16, _ reason: String, _ station: SessionID) -> APIError {
        let parts = reason.split(separator: ":", maxSplits: 1)
        if code == 4409, parts.count == 2 {
            return APIError(status: .conflict, code: String(parts[0]), message: String(parts[1].drop(while: { $0 == " " })))
        }
        let hint = code == 4401 || code == 4403 ? " (do the pairs share TONEARM_TOKEN_SECRET?)" : ""
        return APIError(
            status: .serviceUnavailable, code: "cluster_unavailable",
            message: "the pair that plays \(station) refused to relay it: \(reason)\(hint)", retryAfterSeconds: 5)
    }

    private enum Ending {
        case lost
        case refused(UInt16, String)
        case unwanted
    }

    /// One station's relay: upstream after upstream, following the station, until it is no
    /// longer wanted here, is refused, or plays here.
    private func run(_ station: SessionID, first address: String, outcome: Eventual<Outcome>) async {
        var address = address
        while true {
            let ending = await upstream(station, address: address, outcome: outcome)
            switch ending {
            case .unwanted:
                logger.info("a station relay ends: no follower here", metadata: ["session.id": "\(station)"])
                return
            case .refused(let code, let reason):
                outcome.set(.refused(code, reason))
                finish(station)
                logger.notice("a station relay was refused", metadata: ["session.id": "\(station)", "reason": "\(reason)"])
                return
            case .lost:
                break
            }
            if unwantedNow(station) { return }
            guard let placement = try? await relay.placeWaiting(station) else {
                try? await Task.sleep(for: .seconds(1))
                continue
            }
            guard case .remote(let next) = placement else {
                outcome.set(.local)
                finish(station)
                return
            }
            if next == address { try? await Task.sleep(for: .milliseconds(200)) }
            address = next
        }
    }

    private func finish(_ station: SessionID) {
        running.withLockedValue { _ = $0.removeValue(forKey: station) }
    }

    /// Ends the relay (taken out, so a follow from now on starts another) when no session here
    /// has followed the station for `idleGrace`.
    private func unwantedNow(_ station: SessionID) -> Bool {
        running.withLockedValue { running in
            guard let entry = running[station] else { return true }
            if store.followerCount(station) > 0 {
                running[station]!.wanted = .now
                return false
            }
            guard ContinuousClock.now - entry.wanted > Self.idleGrace else { return false }
            running.removeValue(forKey: station)
            return true
        }
    }

    /// One upstream connection to the station's Router: its packets and events go to this
    /// Router's store until it closes, the station moves on (checked every second once it has
    /// gone quiet), or no follower wants it.
    private func upstream(_ station: SessionID, address: String, outcome: Eventual<Outcome>) async -> Ending {
        let url = address.replacingOccurrences(of: "http", with: "ws", options: .anchored) + "/ws?session=" + Self.escaped(station.description)
        var headers = HTTPFields()
        headers[.authorization] = "Bearer \(tokens.token(for: station))"
        headers[ClusterRelay.forwardedHeader] = relay.member.settings.pairID
        headers[Self.header] = "1"
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 16, additionalHeaders: headers, closeTimeout: .seconds(1))
        let lastHeard = NIOLockedValueBox(ContinuousClock.now)
        let (store, logger) = (store, logger)
        enum Step: Sendable {
            case closed(WebSocketCloseFrame?)
            case moved
            case unwanted
        }
        let step = await withTaskGroup(of: Step.self) { group in
            group.addTask {
                let connection = Task {
                    try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { inbound, _, _ in
                        for try await message in inbound.messages(maxSize: 1 << 20) {
                            lastHeard.withLockedValue { $0 = .now }
                            switch message {
                            case .binary(let bytes):
                                store.relayStation(station, .audio(bytes), event: nil)
                            case .text(let text):
                                // The station's state comes first: the relay hears it.
                                outcome.set(.connected)
                                guard let event = try? WireEvent(jsonLine: Array(text.utf8)), event.sessionID == station,
                                    Self.passed.contains(event.type), event.type != .error || event.playID != nil
                                else { continue }
                                store.relayStation(station, .event(text), event: event)
                            }
                        }
                    }
                }
                guard let result = await connection.resultUnlessCancelled() else { return .moved }
                return .closed(try? result.get())
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    if self.unwantedNow(station) { return .unwanted }
                    guard ContinuousClock.now - lastHeard.withLockedValue({ $0 }) > .milliseconds(500) else { continue }
                    if let placement = try? await self.relay.member.place(station), placement != .remote(address) { return .moved }
                }
                return .moved
            }
            let first = await group.next() ?? .moved
            group.cancelAll()
            return first
        }
        switch step {
        case .unwanted: return .unwanted
        case .moved: return .lost
        case .closed(let close?):
            let code = UInt16(webSocketErrorCode: close.closeCode)
            if code != 4012, (4400..<4500).contains(code) || code == 1008 { return .refused(code, close.reason ?? "") }
            return .lost
        case .closed(nil): return .lost
        }
    }

    /// What a follower's clients are handed of the station's messages: its engine's events, as
    /// followers on the station's own pair get them; not what its controller tells its own
    /// clients (its state, replies, voice, a URL it could not resolve: an `error` without a play).
    static let passed: Set<EventType> = [
        .ready, .finished, .error, .paused, .resumed, .seeked, .progress, .volume, .layerStarted, .layerEnded, .stuck,
    ]

    private static func escaped(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(.init(charactersIn: "-._~"))) ?? text
    }
}
