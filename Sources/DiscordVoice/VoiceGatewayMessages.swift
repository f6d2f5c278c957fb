// The voice gateway's JSON messages (version 8), both ways: what `VoiceGatewayMachine`'s actions
// send, and what the server's text messages mean as its events. Discord's documented shapes:
//
//   out  op 0 Identify {server_id, user_id, session_id, token, max_dave_protocol_version}
//        op 1 Select Protocol {protocol: "udp", data: {address, port, mode}}
//        op 3 Heartbeat {t: nonce, seq_ack}
//        op 5 Speaking {speaking, delay: 0, ssrc}
//        op 7 Resume {server_id, session_id, token, seq_ack}
//   in   op 2 Ready {ssrc, ip, port, modes}, op 4 Session Description {mode, secret_key,
//        dave_protocol_version}, op 6 Heartbeat ACK, op 8 Hello {heartbeat_interval},
//        op 9 Resumed; any of them may carry `seq`.
//
// Everything the server sends is untrusted: a field of the wrong type or out of range makes the
// message unreadable (an `.unreadable` event, which the connection logs), never a trap.
import Foundation

public enum VoiceGatewayMessages {
    /// The text message an action sends, or nil for an action that sends nothing on the socket.
    public static func text(for action: VoiceGatewayMachine.Action) -> String? {
        switch action {
        case .sendIdentify(let credentials, let dave):
            return encode(op: 0, [
                "server_id": credentials.guildID, "user_id": credentials.userID,
                "session_id": credentials.sessionID, "token": credentials.token, "max_dave_protocol_version": dave,
            ])
        case .sendSelectProtocol(let ip, let port, let mode):
            return encode(op: 1, ["protocol": "udp", "data": ["address": ip, "port": port, "mode": mode.rawValue]])
        case .sendHeartbeat(let nonce, let seqAck):
            return encode(op: 3, ["t": nonce, "seq_ack": seqAck])
        case .sendResume(let credentials, let seqAck):
            return encode(op: 7, [
                "server_id": credentials.guildID, "session_id": credentials.sessionID,
                "token": credentials.token, "seq_ack": seqAck,
            ])
        default:
            return nil
        }
    }

    /// Speaking (op 5): 1 while audio is sent (the microphone flag), 0 after it stops.
    public static func speaking(_ speaking: Bool, ssrc: UInt32) -> String {
        encode(op: 5, ["speaking": speaking ? 1 : 0, "delay": 0, "ssrc": ssrc])
    }

    /// What a server message means to the machine: its sequence number first (when it has one),
    /// then the event itself. Opcodes the machine has no use for (speaking of others, clients
    /// connecting, DAVE's JSON messages) give only their sequence number.
    public static func events(fromText text: String) -> [VoiceGatewayMachine.Event] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
              let op = integer(object["op"])
        else { return [.unreadable("not a JSON object with an integer op")] }
        var events: [VoiceGatewayMachine.Event] = []
        if let seq = integer(object["seq"]) { events.append(.sequence(seq)) }
        let data = object["d"] as? [String: Any] ?? [:]
        switch op {
        case 2:
            guard let ssrc = integer(data["ssrc"]).flatMap(UInt32.init(exactly:)), let ip = data["ip"] as? String,
                  let port = integer(data["port"]), (1...65535).contains(port), let modes = data["modes"] as? [String]
            else { return events + [.unreadable("Ready without ssrc, ip, port or modes")] }
            events.append(.ready(ssrc: ssrc, ip: ip, port: port, modes: modes))
        case 4:
            guard let mode = data["mode"] as? String, let key = data["secret_key"] as? [Any] else {
                return events + [.unreadable("Session Description without mode or secret_key")]
            }
            let bytes = key.compactMap { integer($0).flatMap(UInt8.init(exactly:)) }
            guard bytes.count == key.count else { return events + [.unreadable("secret_key holds values that are not bytes")] }
            let dave = integer(data["dave_protocol_version"]) ?? 0
            events.append(.sessionDescription(mode: mode, secretKey: bytes, daveProtocolVersion: dave))
        case 6:
            // v8 echoes the nonce as `d.t`; older versions as `d` itself.
            let nonce = integer(data["t"]) ?? integer(object["d"])
            events.append(.heartbeatAcknowledged(nonce: nonce.map(Int64.init)))
        case 8:
            guard let interval = number(data["heartbeat_interval"]), interval >= 1, interval <= 600_000 else {
                return events + [.unreadable("Hello without a heartbeat_interval of 1 ms to 10 minutes")]
            }
            events.append(.hello(heartbeatInterval: .milliseconds(Int64(interval))))
        case 9:
            events.append(.resumed)
        default:
            break
        }
        return events
    }

    /// Whether a server message is one of DAVE's JSON messages (ops 21 prepare transition, 22
    /// execute transition, 24 prepare epoch), which go to the DAVE session as they are.
    public static func isDave(text: String) -> Bool {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
              let op = integer(object["op"])
        else { return false }
        return [21, 22, 24].contains(op)
    }

    /// The sequence number of a binary message (DAVE's: the first two bytes, big-endian).
    public static func sequence(ofBinary bytes: some Collection<UInt8>) -> Int? {
        var iterator = bytes.makeIterator()
        guard let first = iterator.next(), let second = iterator.next() else { return nil }
        return Int(first) << 8 | Int(second)
    }

    private static func encode(op: Int, _ data: [String: Any]) -> String {
        let object: [String: Any] = ["op": op, "d": data]
        guard let bytes = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return "{}" }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A JSON number that is a whole number within Int (JSONSerialization gives NSNumber).
    private static func integer(_ value: Any?) -> Int? {
        guard let number = value as? NSNumber else { return nil }
        let double = number.doubleValue
        guard double.rounded() == double, abs(double) < 9.0e15 else { return nil }
        return Int(double)
    }

    private static func number(_ value: Any?) -> Double? {
        guard let number = value as? NSNumber else { return nil }
        return number.doubleValue.isFinite ? number.doubleValue : nil
    }
}
