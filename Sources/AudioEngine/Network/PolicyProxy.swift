// A small HTTP forward proxy inside the engine, given to yt-dlp as its `--proxy`: every request
// yt-dlp makes — the page, each redirect it follows, an API call, plain http or https through
// CONNECT — comes through here, where its host is looked up under the source policy and connected
// to at exactly the addresses checked, as the engine's own fetches are (`HTTPSourceFetch`). A page
// on a public host that redirects to the engine's loopback gets no further than this, and a name
// whose answer changes between yt-dlp's look and ours is checked on ours, the one connected to.
//
// It listens on loopback with an ephemeral port and a random credential, so nothing but the
// engine's own yt-dlp uses it; requests are kept to one per connection (the next one, whatever
// its host, comes on a new connection and is checked again).
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceSupport

/// The engine's forward proxy for yt-dlp.
package final class PolicyProxy: Sendable {
    let port: Int
    /// `tonearm:<random>`, required as `Proxy-Authorization: Basic`.
    private let credential: String
    private let channel: any Channel

    /// The proxy URL yt-dlp is given.
    var url: String { "http://\(credential)@127.0.0.1:\(port)" }

    /// How long a client has to send its request head.
    static let headTimeout: TimeAmount = .seconds(10)
    /// The reason phrase of a refusal, which yt-dlp repeats in its error (`YTDLP` looks for it).
    static let refusalPhrase = "Refused by Tonearm's source policy"

    private init(port: Int, credential: String, channel: any Channel) {
        self.port = port
        self.credential = credential
        self.channel = channel
    }

    /// Listens on 127.0.0.1 (an ephemeral port) on `network`'s event loops.
    package static func start(network: SourceNetwork, logger: Logger) async throws -> PolicyProxy {
        let secret = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max)) }.joined()
        let credential = "tonearm:\(secret)"
        let expected = "Basic " + Data(credential.utf8).base64EncodedString()
        let channel = try await ServerBootstrap(group: network.group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let decoder = ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes))
                    try channel.pipeline.syncOperations.addHandler(decoder)
                    try channel.pipeline.syncOperations.addHandler(
                        ProxyConnection(network: network, authorization: expected, decoder: decoder, logger: logger))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        guard let port = channel.localAddress?.port else { throw ProxyError("the proxy for yt-dlp could not bind") }
        logger.info("yt-dlp goes through the source policy", metadata: ["proxy.port": "\(port)"])
        return PolicyProxy(port: port, credential: credential, channel: channel)
    }

    package func close() async {
        try? await channel.close()
    }

    struct ProxyError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

/// One client connection: its request head decides where it goes; then bytes flow both ways.
///
/// `@unchecked Sendable`: used on its channel's event loop only.
private final class ProxyConnection: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = ByteBuffer

    private let network: SourceNetwork
    private let authorization: String
    private let decoder: ByteToMessageHandler<HTTPRequestDecoder>
    private let logger: Logger

    private enum State {
        case awaitingHead
        /// Looking up and connecting; what the client sends meanwhile waits.
        case connecting(pending: [HTTPServerRequestPart])
        /// A plain http request, forwarded re-encoded; the answer comes back as raw bytes.
        case forwarding(any Channel)
        case done
    }
    private var state = State.awaitingHead
    private var headTimer: Scheduled<Void>?

    init(network: SourceNetwork, authorization: String, decoder: ByteToMessageHandler<HTTPRequestDecoder>, logger: Logger) {
        self.network = network
        self.authorization = authorization
        self.decoder = decoder
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        headTimer = context.eventLoop.scheduleTask(in: PolicyProxy.headTimeout) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch state {
        case .awaitingHead:
            guard case .head(let head) = part else { return refuse(context, 400, "Bad Request", "a request head was expected") }
            headTimer?.cancel()
            begin(context, head)
        case .connecting(var pending):
            pending.append(part)
            state = .connecting(pending: pending)
        case .forwarding(let upstream):
            // A second request on this connection would go to the first one's host: the answer
            // says `Connection: close`, so a client that sends one anyway gets nothing.
            if case .head = part { return }
            upstream.writeAndFlush(Self.clientPart(part), promise: nil)
        case .done:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        headTimer?.cancel()
        if case .forwarding(let upstream) = state { upstream.close(promise: nil) }
        state = .done
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    // MARK: The request

    private func begin(_ context: ChannelHandlerContext, _ head: HTTPRequestHead) {
        guard head.headers.first(name: "Proxy-Authorization") == authorization else {
            return refuse(context, 407, "Proxy Authentication Required", "only the engine's own yt-dlp may use this proxy",
                extra: "Proxy-Authenticate: Basic realm=\"tonearm\"\r\n")
        }
        let tunnel = head.method == .CONNECT
        guard let (host, port) = tunnel ? Self.authority(head.uri) : Self.absolute(head.uri) else {
            return refuse(context, 400, "Bad Request", "\(head.uri) is not a target this proxy serves (http URLs, CONNECT host:port)")
        }
        state = .connecting(pending: [])
        let loop = context.eventLoop
        let channel = context.channel
        // The callbacks run on this same loop, where the context may be used.
        let bound = NIOLoopBound(context, eventLoop: loop)
        network.addresses(of: host, port: port, on: loop)
            .flatMap { addresses in self.connect(addresses[...], on: loop, client: channel, tunnel: tunnel) }
            .whenComplete { result in
                let context = bound.value
                guard channel.isActive else {
                    if case .success(let upstream) = result { upstream.close(promise: nil) }
                    return
                }
                switch result {
                case .success(let upstream):
                    tunnel ? self.openTunnel(context, to: upstream) : self.forward(context, head, to: upstream, host: host, port: port)
                case .failure(let error as APIError) where error.code == "private_address":
                    self.logger.warning("refused a request of yt-dlp", metadata: ["host": "\(host)", "reason": "\(error.message)"])
                    self.refuse(context, 403, PolicyProxy.refusalPhrase, error.message)
                case .failure(let error):
                    self.refuse(context, 502, "Bad Gateway", "cannot reach \(host):\(port): \(error)")
                }
            }
    }

    /// Tries the checked addresses in order; the first that connects carries the request.
    private func connect(
        _ addresses: ArraySlice<SocketAddress>, on loop: any EventLoop, client: any Channel, tunnel: Bool
    ) -> EventLoopFuture<any Channel> {
        guard let address = addresses.first else {
            return loop.makeFailedFuture(PolicyProxy.ProxyError("no address to connect to"))
        }
        return ClientBootstrap(group: loop)
            .connectTimeout(network.connectTimeout)
            .channelInitializer { upstream in
                upstream.eventLoop.makeCompletedFuture {
                    if !tunnel {
                        try upstream.pipeline.syncOperations.addHandler(HTTPRequestEncoder())
                        try upstream.pipeline.syncOperations.addHandler(ClosingResponseHead())
                    }
                    try upstream.pipeline.syncOperations.addHandler(Relay(to: client))
                }
            }
            .connect(to: address)
            .flatMapError { error in
                addresses.count > 1 ? self.connect(addresses.dropFirst(), on: loop, client: client, tunnel: tunnel) : loop.makeFailedFuture(error)
            }
    }

    /// CONNECT: answers 200, and from then on the two connections carry each other's bytes.
    private func openTunnel(_ context: ChannelHandlerContext, to upstream: any Channel) {
        state = .done
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: "HTTP/1.1 200 Connection Established\r\n\r\n")), promise: nil)
        let pipeline = context.pipeline.syncOperations
        do {
            // In this order, so what the client sent after its head reaches the relay.
            try pipeline.addHandler(Relay(to: upstream))
            pipeline.removeHandler(context: context, promise: nil)
            pipeline.removeHandler(decoder, promise: nil)
        } catch {
            upstream.close(promise: nil)
            context.close(promise: nil)
        }
    }

    /// A plain http request: sent on in origin form, with `Connection: close` and without the
    /// proxy's own headers; the parts that came meanwhile follow it.
    private func forward(_ context: ChannelHandlerContext, _ head: HTTPRequestHead, to upstream: any Channel, host: String, port: Int) {
        guard case .connecting(let pending) = state else { return }
        state = .forwarding(upstream)
        var outgoing = head
        outgoing.uri = URLComponents(string: head.uri).map { components in
            (components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath)
                + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
        } ?? "/"
        for name in ["Proxy-Authorization", "Proxy-Connection", "Connection", "Keep-Alive"] { outgoing.headers.remove(name: name) }
        outgoing.headers.add(name: "Connection", value: "close")
        if !outgoing.headers.contains(name: "Host") { outgoing.headers.add(name: "Host", value: port == 80 ? host : "\(host):\(port)") }
        upstream.write(HTTPClientRequestPart.head(outgoing), promise: nil)
        for part in pending { upstream.write(Self.clientPart(part), promise: nil) }
        upstream.flush()
    }

    private static func clientPart(_ part: HTTPServerRequestPart) -> HTTPClientRequestPart {
        switch part {
        case .head(let head): .head(head)
        case .body(let bytes): .body(.byteBuffer(bytes))
        case .end(let trailers): .end(trailers)
        }
    }

    /// A short answer, then the connection ends. Only its sending side at first: closed with
    /// bytes of the client still unread, the kernel would answer with a reset, which can reach
    /// the client before the answer does (yt-dlp then reports a broken proxy, not the refusal).
    /// The client closes its side once it has read the answer; a second later it is cut anyway.
    private func refuse(_ context: ChannelHandlerContext, _ status: Int, _ phrase: String, _ message: String, extra: String = "") {
        state = .done
        let body = message + "\n"
        let text = "HTTP/1.1 \(status) \(phrase)\r\nContent-Type: text/plain; charset=utf-8\r\n\(extra)"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: text))).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
            channel.eventLoop.scheduleTask(in: .seconds(1)) { channel.close(promise: nil) }
        }
    }

    // MARK: Targets

    /// `host:port` of a CONNECT (`[v6]:port` for IPv6).
    static func authority(_ target: String) -> (String, Int)? {
        guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]),
            (1...65535).contains(port)
        else { return nil }
        var host = String(target[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    /// Host and port of an absolute `http://` request target.
    static func absolute(_ target: String) -> (String, Int)? {
        guard let components = URLComponents(string: target), components.scheme?.lowercased() == "http",
            let host = components.host, !host.isEmpty
        else { return nil }
        return (host, components.port ?? 80)
    }
}

/// Passes every byte read on one channel to the other, and closes the other when one closes.
///
/// `@unchecked Sendable`: used on its channel's event loop; `peer` is only written and closed.
private final class Relay: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    private let peer: any Channel

    init(to peer: any Channel) { self.peer = peer }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        peer.writeAndFlush(unwrapInboundIn(data), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        peer.close(promise: nil)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
