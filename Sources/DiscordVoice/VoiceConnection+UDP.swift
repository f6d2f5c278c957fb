// The voice connection's UDP socket and IP discovery (Discord's documented 74-byte exchange):
// this side sends type 0x1, length 70, its SSRC, 64 zero bytes and a zero port to the address
// Ready named; the server answers type 0x2 with the address and port it saw the packet come from,
// which Select Protocol then names. One socket serves the connection for its whole life: a
// resume keeps it, a new identify discovers again through it.
import NIOCore
import NIOPosix
import Synchronization

/// IP discovery did not give an address.
public enum IPDiscoveryError: Error, Equatable, Sendable {
    case noAnswer(tries: Int)
    case badAddress(String)
}

enum IPDiscovery {
    static let packetSize = 74

    static func request(ssrc: UInt32) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt16(0x1))
        buffer.writeInteger(UInt16(70))
        buffer.writeInteger(ssrc)
        buffer.writeRepeatingByte(0, count: 64)
        buffer.writeInteger(UInt16(0))
        return buffer
    }

    /// The address and port in an answer, or nil when `packet` is not an answer for `ssrc`.
    static func answer(_ packet: ByteBuffer, ssrc: UInt32) -> (ip: String, port: Int)? {
        guard packet.readableBytes == packetSize,
              packet.getInteger(at: packet.readerIndex, as: UInt16.self) == 0x2,
              packet.getInteger(at: packet.readerIndex + 4, as: UInt32.self) == ssrc,
              let field = packet.getBytes(at: packet.readerIndex + 8, length: 64),
              let port = packet.getInteger(at: packet.readerIndex + 72, as: UInt16.self), port != 0
        else { return nil }
        let ip = String(decoding: field.prefix { $0 != 0 }, as: UTF8.self)
        guard !ip.isEmpty, ip.utf8.allSatisfy({ $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: ":") || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) }) else {
            return nil
        }
        return (ip, Int(port))
    }
}

/// Hands every datagram's payload to the connection's waiting discovery, if one waits.
private final class DiscoveryHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let deliver: @Sendable (ByteBuffer) -> Void
    init(deliver: @escaping @Sendable (ByteBuffer) -> Void) { self.deliver = deliver }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        deliver(unwrapInboundIn(data).data)
    }
}

extension VoiceConnection {
    /// Opens the UDP socket if there is none, points it at `ip:port` and asks what address this
    /// side has there: three tries a second apart.
    func discover(ip: String, port: Int, ssrc: UInt32) async throws -> (ip: String, port: Int) {
        let remote: SocketAddress
        do {
            remote = try SocketAddress(ipAddress: ip, port: port)
        } catch {
            throw IPDiscoveryError.badAddress(ip)
        }
        let existing = media.withLock { $0.channel }
        let channel: any Channel
        if let existing {
            channel = existing
        } else {
            let handler = DiscoveryHandler { [weak self] packet in
                _ = self?.discoveryReplies.withLock { $0?.yield(packet) }
            }
            channel = try await DatagramBootstrap(group: eventLoop)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(handler)
                    }
                }
                .bind(host: remote.protocol == .inet6 ? "::" : "0.0.0.0", port: 0).get()
        }
        media.withLock {
            $0.channel = channel
            $0.remote = remote
        }
        defer { discoveryReplies.withLock { $0?.finish(); $0 = nil } }
        let tries = 3
        for _ in 0..<tries {
            // A stream per try: a stream whose reader was cancelled (the try timed out) is finished.
            let (answers, continuation) = AsyncStream<ByteBuffer>.makeStream(bufferingPolicy: .bufferingNewest(8))
            discoveryReplies.withLock { $0?.finish(); $0 = continuation }
            try await channel.writeAndFlush(AddressedEnvelope(remoteAddress: remote, data: IPDiscovery.request(ssrc: ssrc))).get()
            let found = await withTaskGroup(of: (ip: String, port: Int)?.self) { group in
                group.addTask {
                    for await packet in answers {
                        if let answer = IPDiscovery.answer(packet, ssrc: ssrc) { return answer }
                    }
                    return nil
                }
                group.addTask {
                    try? await Task.sleep(for: .seconds(1))
                    return nil
                }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first
            }
            if let found { return found }
        }
        throw IPDiscoveryError.noAnswer(tries: tries)
    }
}
