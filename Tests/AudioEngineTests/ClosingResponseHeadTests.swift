// The proxy's answers tell the client the connection ends with them, whatever the server said,
// so yt-dlp opens a new connection for its next hop (and meets the policy there) rather than
// writing to one being closed.
import NIOCore
import NIOEmbedded
import Testing

@testable import AudioEngine

@Suite struct ClosingResponseHeadTests {
    /// What the client receives when the server's answer arrives in `chunks`.
    func relayed(_ chunks: [String]) throws -> String {
        let channel = EmbeddedChannel(handler: ClosingResponseHead())
        for chunk in chunks { try channel.writeInbound(ByteBuffer(string: chunk)) }
        var received = ""
        while var part = try channel.readInbound(as: ByteBuffer.self) { received += part.readString(length: part.readableBytes) ?? "" }
        _ = try channel.finish()
        return received
    }

    @Test func aKeptAliveAnswerSaysItCloses() throws {
        let received = try relayed([
            "HTTP/1.1 302 Found\r\nLocation: http://x/\r\nconnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\n"
        ])
        #expect(received == "HTTP/1.1 302 Found\r\nLocation: http://x/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    }

    @Test func aHeadSplitAcrossReadsIsRewrittenOnceAndTheBodyPassesUntouched() throws {
        let received = try relayed(["HTTP/1.1 200 OK\r\nContent-Le", "ngth: 14\r\n\r", "\nfirst", " part\r\n\r\nend"])
        #expect(received == "HTTP/1.1 200 OK\r\nContent-Length: 14\r\nConnection: close\r\n\r\nfirst part\r\n\r\nend")
    }

    @Test func aHeadWithoutEndIsNotPassedOnPastTheLimit() throws {
        let channel = EmbeddedChannel(handler: ClosingResponseHead())
        try channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\n" + String(repeating: "X-Filler: 0123456789\r\n", count: 4_000)))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)
        #expect(!channel.isActive, "a head over 64 KB ends the connection")
    }
}
