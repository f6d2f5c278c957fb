// The proxy serves one plain-http request per connection and closes it after the answer. Many
// servers answer HTTP/1.1 without saying so (Python's http.server among them, even to a request
// with `Connection: close`), and a client that believes the connection stays open sends its next
// request — yt-dlp following a redirect — on a socket the proxy is closing: it gets a reset and
// reports a broken proxy instead of the policy's refusal of that next hop. So the answer's head
// goes to the client with its own connection headers replaced by `Connection: close`.
import Foundation
import NIOCore

/// Rewrites the head of the upstream's answer (everything up to the first empty line) and passes
/// every byte after it untouched. A head longer than `maxHead` ends both connections.
final class ClosingResponseHead: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// The longest answer head accepted (nginx's default buffers allow 8–32 KB).
    static let maxHead = 64 * 1024
    private static let headEnd: [UInt8] = Array("\r\n\r\n".utf8)
    private static let dropped: Set<String> = ["connection", "keep-alive", "proxy-connection"]

    private var head: ByteBuffer?
    private var passing = false

    init() {}

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        guard !passing else { return context.fireChannelRead(data) }
        if head == nil { head = bytes } else { head?.writeBuffer(&bytes) }
        guard var buffered = head else { return }
        guard let end = Self.find(Self.headEnd, in: buffered.readableBytesView) else {
            if buffered.readableBytes > Self.maxHead { context.close(promise: nil) }
            return
        }
        let headLength = end - buffered.readerIndex
        guard let text = buffered.readString(length: headLength) else { return context.close(promise: nil) }
        buffered.moveReaderIndex(forwardBy: Self.headEnd.count)
        var out = context.channel.allocator.buffer(capacity: headLength + 32 + buffered.readableBytes)
        out.writeString(Self.rewritten(text))
        out.writeBuffer(&buffered)
        head = nil
        passing = true
        context.fireChannelRead(wrapInboundOut(out))
    }

    /// The head's lines without their connection headers, then `Connection: close` and the empty
    /// line that ends a head.
    static func rewritten(_ head: String) -> String {
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).filter { line in
            guard let colon = line.firstIndex(of: ":") else { return true }
            return !dropped.contains(line[..<colon].trimmingCharacters(in: .whitespaces).lowercased())
        }
        return lines.joined(separator: "\r\n") + "\r\nConnection: close\r\n\r\n"
    }

    /// The reader index at which `needle` starts in `bytes`, if it does.
    private static func find(_ needle: [UInt8], in bytes: ByteBufferView) -> Int? {
        guard bytes.count >= needle.count else { return nil }
        var index = bytes.startIndex
        let last = bytes.endIndex - needle.count
        while index <= last {
            if bytes[index] == needle[0] && bytes[index..<index + needle.count].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
