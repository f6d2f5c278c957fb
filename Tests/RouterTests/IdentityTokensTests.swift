import Foundation
import TestSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct IdentityTokensTests {
    let tokens = IdentityTokens(secret: Data("a test secret of enough length!!".utf8))

    @Test func anIssuedTokenGrantsItsOwnSessionOnly() throws {
        let identity = tokens.issue()
        #expect(identity.sessionID.count == 19)
        let digits = identity.sessionID.description.allSatisfy { $0.isNumber }
        #expect(digits)
        #expect(tokens.verify(identity.token) == identity.sessionID)
        let other = tokens.issue()
        #expect(other.sessionID != identity.sessionID)
        #expect(tokens.verify(other.token) == other.sessionID)
    }

    @Test func forgedOrDamagedTokensAreRejected() throws {
        let identity = tokens.issue()
        let parts = identity.token.split(separator: ".").map(String.init)
        let otherSession = "v1.1234567890123456789.\(parts[2])"
        let otherSecret = IdentityTokens(secret: Data("another secret, also long enough".utf8))
        for bad in [
            "", "garbage", otherSession, otherSecret.token(for: identity.sessionID), identity.token + "x",
            "v2.\(parts[1]).\(parts[2])", "v1.\(parts[1])", "v1.has space.\(parts[2])",
        ] {
            #expect(tokens.verify(bad) == nil, "accepted \(bad)")
        }
    }

    @Test func aListenTokenOnlyHearsAndIsNotAControlToken() throws {
        let identity = tokens.issue()
        let listen = tokens.listenToken(for: identity.sessionID)
        #expect(listen.hasPrefix("l1.\(identity.sessionID)."))
        #expect(tokens.verifyListen(listen) == identity.sessionID)
        #expect(tokens.verify(listen) == nil, "a listen token controls nothing")
        #expect(tokens.verifyListen(identity.token) == nil, "a control token is not a listen token")
        let parts = listen.split(separator: ".").map(String.init)
        // The same signature under the other prefix, or for another session: refused.
        #expect(tokens.verify("v1.\(parts[1]).\(parts[2])") == nil)
        #expect(tokens.verifyListen("l1.1234567890123456789.\(parts[2])") == nil)
        let otherSecret = IdentityTokens(secret: Data("another secret, also long enough".utf8))
        #expect(tokens.verifyListen(otherSecret.listenToken(for: identity.sessionID)) == nil)
        // Remembered once verified, refused as before when forged: a forged token asked for again
        // is verified again (never remembered), and a good one still names its own session.
        #expect(tokens.verifyListen(listen) == identity.sessionID)
        #expect(tokens.verifyListen(otherSecret.listenToken(for: identity.sessionID)) == nil)
        #expect(otherSecret.verifyListen(listen) == nil, "another secret's cache holds nothing of this one's")
    }

    @Test func theRememberedTokensStayBounded() {
        let remembered = VerifiedTokens()
        let id = tokens.issue().sessionID
        for index in 0..<(VerifiedTokens.limit + 10) { remembered.remember("token-\(index)", id) }
        #expect(remembered.session(of: "token-\(VerifiedTokens.limit + 9)") == id)
        #expect(remembered.session(of: "token-0") == nil, "the oldest were let go")
    }

    @Test func theSecretIsGeneratedOnceAndKept() throws {
        let directory = try TemporaryDirectory()
        let first = try IdentityTokens.secret(configured: nil, directory: directory.file("data"))
        let second = try IdentityTokens.secret(configured: nil, directory: directory.file("data"))
        #expect(first.count == 32 && first == second)
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.file("data/token-secret"))
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect(try IdentityTokens.secret(configured: "configured", directory: directory.path) == Data("configured".utf8))
    }

    @Test func snowflakesHaveNineteenDigitsAndGrowWithTime() {
        let early = IdentityTokens.snowflake(now: Date(timeIntervalSince1970: 1_700_000_000))
        let later = IdentityTokens.snowflake(now: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(early.count == 19 && later.count == 19)
        #expect(UInt64(early.description)! < UInt64(later.description)!)
    }
}
