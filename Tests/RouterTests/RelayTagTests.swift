// The tag line a shared upstream puts before each client's command (and the owner before its
// answer): what follows it arrives exactly as the client sent it, and nothing a client or an owner
// sends untagged is read as a tag.
import Testing

@testable import TonearmRouter

@Suite struct RelayTagTests {
    @Test func aTaggedCommandSplitsBackIntoItsTagAndTheClientsOwnText() throws {
        let command = "{\n  \"op\": \"play\",\n  \"url\": \"a.mp3\", \"id\": 7\n}"
        let tag = RelayTag(relay: "12", token: "secret \"token\"", join: nil)
        let (read, body) = try #require(RelayTag.split(tag.tagging(command)))
        #expect(read == tag)
        #expect(body == command)
        // A joining client's request has no command; the owner's answer keeps the join, not the token.
        let join = RelayTag(relay: "3", token: "t", join: true)
        let (joining, empty) = try #require(RelayTag.split(join.tagging("")))
        #expect(joining == join && empty.isEmpty)
        #expect(join.answering == RelayTag(relay: "3", token: nil, join: true))
    }

    @Test func untaggedMessagesAreNotTags() {
        // A client's command, pretty-printed: its first line is not a tag.
        #expect(RelayTag.split("{\n\"op\":\"stop\"}") == nil)
        #expect(RelayTag.split("{\"op\":\"stop\",\"id\":1}\n{\"op\":\"next\"}") == nil)
        // The owner's own messages are single lines.
        #expect(RelayTag.split(#"{"type":"state","session_id":"a"}"#) == nil)
        #expect(RelayTag.split("not json\n{}") == nil)
        #expect(RelayTag.split("") == nil)
    }
}
