// The tag a shared upstream (SharedUpstream) puts before each client's command, and the owner's
// Router before its answer, so that one connection carries many clients' commands, each checked
// against that client's own token and answered to it alone.
import Foundation
import ServiceSupport

/// The line a shared upstream puts before a client's command, and the owner before its answer.
struct RelayTag: Codable, Sendable, Equatable {
    /// Which client of the relaying Router (`RelayMember.number`), or `voice` for the guild's
    /// voice credentials sent again on a new upstream (whose answer no client is waiting for).
    var relay: String
    /// The client's own token: its rights are checked at the owner, command by command.
    var token: String?
    /// Asks the owner for the session's state message (a client joining a connected upstream).
    var join: Bool?

    static let voice = "voice"

    func tagging(_ text: String) -> String { JSONCoding.text(self) + "\n" + text }

    /// The tag of the owner's answer: the same client (and whether it joins), without its token.
    var answering: RelayTag { RelayTag(relay: relay, join: join) }

    /// The tag and what follows it, when `text` begins with one. The owner's own messages are
    /// single lines of JSON, so only a tagged one holds a line break.
    static func split(_ text: String) -> (tag: RelayTag, body: String)? {
        guard text.hasPrefix("{"), let newline = text.firstIndex(of: "\n"),
            let tag = try? JSONDecoder().decode(RelayTag.self, from: Data(text[..<newline].utf8))
        else { return nil }
        return (tag, String(text[text.index(after: newline)...]))
    }
}
