// Anonymous browser identities: a server-signed token that names the one session its holder may
// hear and control. HMAC-SHA256 over the session id with a secret from configuration (or one
// generated and kept in the data directory on first start).
import Crypto
import Foundation
import Synchronization
import WireProtocol

/// An identity as `POST /api/identity` hands it out.
struct Identity: Sendable, Equatable, Codable {
    var token: String
    var sessionID: SessionID

    enum CodingKeys: String, CodingKey {
        case token
        case sessionID = "session_id"
    }
}

/// Issues and verifies identity tokens.
struct IdentityTokens: Sendable {
    private let key: SymmetricKey
    /// Listen tokens already verified: every request of every HLS listener carries one, most
    /// listeners of a station the same, so each is verified once, not at every request.
    private let listenTokens = VerifiedTokens()
    /// The token format's version, so a later format can be told apart.
    private static let version = "v1"

    init(secret: Data) {
        key = SymmetricKey(data: secret)
    }

    /// A new identity with a fresh 19-digit snowflake-style session id.
    func issue(now: Date = Date()) -> Identity {
        let id = Self.snowflake(now: now)
        return Identity(token: token(for: id), sessionID: id)
    }

    /// A listen token's prefix: it lets its holder hear one session (`/listen`, `/hls`), not
    /// control it, so it can be handed to listeners by the thousand.
    private static let listenVersion = "l1"

    /// The token for `sessionID`.
    func token(for sessionID: SessionID) -> String { sign(Self.version, sessionID) }

    /// The listen-only token for `sessionID`.
    func listenToken(for sessionID: SessionID) -> String { sign(Self.listenVersion, sessionID) }

    /// The session a token grants, or nil when it is malformed or not signed with this secret.
    func verify(_ token: String) -> SessionID? { verified(token, Self.version) }

    /// The session a listen token lets its holder hear, or nil when it is not one.
    func verifyListen(_ token: String) -> SessionID? {
        if let known = listenTokens.session(of: token) { return known }
        guard let id = verified(token, Self.listenVersion) else { return nil }
        listenTokens.remember(token, id)
        return id
    }

    private func sign(_ version: String, _ sessionID: SessionID) -> String {
        let payload = "\(version).\(sessionID)"
        let mac = HMAC<SHA256>.authenticationCode(for: Data(payload.utf8), using: key)
        return payload + "." + Self.base64URL(Data(mac))
    }

    private func verified(_ token: String, _ version: String) -> SessionID? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == version, let mac = Self.decodeBase64URL(String(parts[2])),
            let id = try? SessionID(String(parts[1]))
        else { return nil }
        let payload = Data("\(parts[0]).\(parts[1])".utf8)
        guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: payload, using: key) else { return nil }
        return id
    }

    /// Discord's layout: milliseconds since 2015-01-01 shifted left by 22, random low bits.
    /// Always 19 digits until the year 2090.
    static func snowflake(now: Date) -> SessionID {
        let epoch: UInt64 = 1_420_070_400_000
        let milliseconds = UInt64(max(0, now.timeIntervalSince1970 * 1_000))
        let value = ((milliseconds - min(milliseconds, epoch)) << 22) | UInt64.random(in: 0..<(1 << 22))
        var text = String(value)
        if text.count < 19 { text = String(repeating: "1", count: 19 - text.count) + text }
        // 19 ASCII digits always make a valid id.
        return try! SessionID(text)
    }

    /// The secret to sign with: `configured` if given, else the one kept in `directory`
    /// (created with owner-only permissions on first start).
    static func secret(configured: String?, directory: String) throws -> Data {
        if let configured, !configured.isEmpty { return Data(configured.utf8) }
        let path = (directory as NSString).appendingPathComponent("token-secret")
        if let existing = FileManager.default.contents(atPath: path), existing.count >= 32 { return existing }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let fresh = Data(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) })
        guard FileManager.default.createFile(atPath: path, contents: fresh, attributes: [.posixPermissions: 0o600]) else {
            throw RouterConfigurationError(message: "cannot write the token secret to \(path)")
        }
        return fresh
    }

    private static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func decodeBase64URL(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}

/// Tokens whose signature was found good, and the session each names. Only good tokens are kept
/// (a forged one is verified every time and never stored), at most `limit`; when full it starts
/// again empty. A token is good for as long as the secret is, so nothing else expires.
final class VerifiedTokens: Sendable {
    private let known = Mutex<[String: SessionID]>([:])
    static let limit = 4_096

    func session(of token: String) -> SessionID? { known.withLock { $0[token] } }

    func remember(_ token: String, _ id: SessionID) {
        known.withLock { known in
            if known.count >= Self.limit { known.removeAll(keepingCapacity: true) }
            known[token] = id
        }
    }
}
