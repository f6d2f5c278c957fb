// One network source read over HTTP(S) into its read-ahead buffer, on an event loop: a GET from a
// byte offset, redirects followed (each hop's host looked up and checked under the policy, then
// connected to at exactly the addresses checked), reading only while the buffer has room, and a
// dropped or stalled connection reopened where it stopped (a Range request), a few times in a
// row at most. Nothing here blocks a thread: DNS runs on a thread of its own per lookup.
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import ServiceSupport

/// Where a fetch delivers what it reads: the read-ahead buffer. Called on the fetch's event loop.
/// Every call carries the epoch of the `start(at:epoch:)` it belongs to, so the sink can ignore
/// what an earlier start still delivers after it moved on (a seek).
protocol SourceFetchSink: AnyObject, Sendable {
    /// A response began at byte `offset`; `size` is the whole source's, when the server says.
    func fetchStarted(size: Int64?, at offset: Int64, epoch: UInt64)
    /// The next bytes; answers whether there is room for more now (if not, `resume()` later).
    func fetchReceived(_ bytes: ByteBuffer, epoch: UInt64) -> Bool
    /// The source is complete.
    func fetchEnded(epoch: UInt64)
    /// The source cannot be read (refused, not found, or the connection failed too often).
    func fetchFailed(_ error: MediaError, epoch: UInt64)
    /// A connection dropped or stalled and is being reopened.
    func fetchReconnecting(epoch: UInt64)
}

/// Reads one URL into a `SourceFetchSink`.
///
/// `@unchecked Sendable`: every mutable field is touched only on `loop`; the public methods hop
/// there first.
final class HTTPSourceFetch: @unchecked Sendable {
    private let url: String
    private let headers: [(String, String)]
    private let network: SourceNetwork
    private let loop: any EventLoop
    private let maxReconnects: Int

    // Loop-confined:
    /// Let go at `stop()`, which breaks the cycle with the buffer that owns this fetch.
    private var sink: (any SourceFetchSink)?
    private var channel: (any Channel)?
    /// The sink's epoch for what is read now.
    private var epoch: UInt64 = 0
    /// Bumped by every new connection; callbacks from older ones are ignored.
    private var attempt: UInt64 = 0
    /// The next byte wanted.
    private var offset: Int64 = 0
    /// Bytes at the start of this response that precede `offset` (a server that ignored Range).
    private var skip: Int64 = 0
    private var size: Int64?
    private var paused = false
    private var stopped = false
    private var finished = false
    private var failedInARow = 0
    private var lastProgress = NIODeadline.now()
    private var watchdog: RepeatedTask?

    init(url: String, headers: [String: String], network: SourceNetwork, maxReconnects: Int) {
        self.url = url
        self.headers = headers.sorted { $0.key < $1.key }
        self.network = network
        self.loop = network.group.next()
        self.maxReconnects = maxReconnects
    }

    /// Starts reading from `offset` into `sink`, dropping whatever connection there is (a
    /// start, or a seek outside what is buffered); what follows is delivered with `epoch`. The
    /// fetch keeps `sink` until `stop()`.
    func start(at offset: Int64, epoch: UInt64, into sink: some SourceFetchSink) {
        loop.execute {
            guard !self.stopped else { return }
            self.sink = sink
            self.epoch = epoch
            self.failedInARow = 0
            self.finished = false
            self.connect(at: offset)
            if self.watchdog == nil {
                self.watchdog = self.loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in
                    self.checkForStall()
                }
            }
        }
    }

    /// The buffer has room again.
    func resume() {
        loop.execute {
            guard self.paused, !self.stopped else { return }
            self.paused = false
            self.lastProgress = .now()
            self.channel?.read()
        }
    }

    /// Ends reading for good.
    func stop() {
        loop.execute {
            self.stopped = true
            self.sink = nil
            self.attempt += 1
            self.watchdog?.cancel()
            self.watchdog = nil
            self.channel?.close(promise: nil)
            self.channel = nil
        }
    }

    // MARK: Connecting

    private func connect(at offset: Int64) {
        attempt += 1
        channel?.close(promise: nil)
        channel = nil
        paused = false
        self.offset = offset
        lastProgress = .now()
        open(url, redirectsLeft: SourceNetwork.maxRedirects, attempt: attempt)
    }

    /// One hop: checks the URL, looks its host up under the policy and connects.
    private func open(_ target: String, redirectsLeft: Int, attempt mine: UInt64) {
        guard let components = URLComponents(string: target), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty
        else {
            return fail(MediaError(kind: .openFailed, message: "cannot fetch \"\(target)\": only http(s) URLs with a host"))
        }
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        let request = Self.request(components, host: host, offset: offset, headers: headers)
        network.addresses(of: host, port: port, on: loop)
            .flatMap { addresses in
                self.connect(to: addresses[...], host: host, tls: scheme == "https", request: request, target: target, redirectsLeft: redirectsLeft, attempt: mine)
            }
            .whenComplete { result in
                switch result {
                case .success(let channel):
                    guard mine == self.attempt, !self.stopped else {
                        channel.close(promise: nil)
                        return
                    }
                    self.channel = channel
                    self.lastProgress = .now()
                    channel.read()
                case .failure(let error):
                    guard mine == self.attempt, !self.stopped else { return }
                    if let refusal = error as? APIError, refusal.code == "private_address" || refusal.code == "source_unreachable" {
                        // A policy refusal is final: a retry would be refused the same way.
                        self.fail(MediaError(kind: refusal.code == "private_address" ? .refused : .openFailed, message: refusal.message))
                    } else {
                        self.retry(after: "cannot connect to \(host): \(error)")
                    }
                }
            }
    }

    /// Tries the checked addresses in order; the first that connects carries the request.
    private func connect(
        to addresses: ArraySlice<SocketAddress>, host: String, tls: Bool, request: HTTPRequestHead, target: String,
        redirectsLeft: Int, attempt mine: UInt64
    ) -> EventLoopFuture<any Channel> {
        guard let address = addresses.first else {
            return loop.makeFailedFuture(MediaError(kind: .openFailed, message: "\(host) has no address to connect to"))
        }
        let context = network.tls
        let isName = IPAddressLiteral.isLiteral(host) == false
        let handler = ResponseHandler(fetch: self, attempt: mine, request: request, target: target, redirectsLeft: redirectsLeft)
        return ClientBootstrap(group: loop)
            .connectTimeout(network.connectTimeout)
            .channelOption(.autoRead, value: false)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if tls { try pipeline.addHandler(NIOSSLClientHandler(context: context, serverHostname: isName ? host : nil)) }
                    try pipeline.addHTTPClientHandlers()
                    try pipeline.addHandler(handler)
                }
            }
            .connect(to: address)
            .flatMapError { error in
                addresses.count > 1
                    ? self.connect(to: addresses.dropFirst(), host: host, tls: tls, request: request, target: target, redirectsLeft: redirectsLeft, attempt: mine)
                    : self.loop.makeFailedFuture(error)
            }
    }

    private static func request(
        _ components: URLComponents, host: String, offset: Int64, headers: [(String, String)]
    ) -> HTTPRequestHead {
        var uri = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { uri += "?" + query }
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: uri)
        let authority = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        head.headers.add(name: "Host", value: components.port.map { "\(authority):\($0)" } ?? authority)
        head.headers.add(name: "Accept", value: "*/*")
        head.headers.add(name: "Accept-Encoding", value: "identity")
        head.headers.add(name: "Connection", value: "close")
        if offset > 0 { head.headers.add(name: "Range", value: "bytes=\(offset)-") }
        for (name, value) in headers where !["host", "range", "connection", "accept-encoding"].contains(name.lowercased()) {
            head.headers.add(name: name, value: value)
        }
        if !head.headers.contains(name: "User-Agent") { head.headers.add(name: "User-Agent", value: "Tonearm") }
        return head
    }

    // MARK: The response

    fileprivate func received(_ part: HTTPClientResponsePart, attempt mine: UInt64, handler: ResponseHandler) {
        guard mine == attempt, !stopped else { return }
        switch part {
        case .head(let head):
            responseBegan(head, handler: handler)
        case .body(var bytes):
            guard !finished else { return }
            if skip > 0 {
                let dropped = Int(min(Int64(bytes.readableBytes), skip))
                bytes.moveReaderIndex(forwardBy: dropped)
                skip -= Int64(dropped)
            }
            guard bytes.readableBytes > 0 else { return }
            offset += Int64(bytes.readableBytes)
            failedInARow = 0
            lastProgress = .now()
            if sink?.fetchReceived(bytes, epoch: epoch) == false { paused = true }
        case .end:
            guard !finished else { return }
            if let size, offset < size {
                retry(after: "the connection ended at byte \(offset) of \(size)")
            } else {
                finished = true
                channel?.close(promise: nil)
                channel = nil
                sink?.fetchEnded(epoch: epoch)
            }
        }
    }

    private func responseBegan(_ head: HTTPResponseHead, handler: ResponseHandler) {
        let status = head.status.code
        if [301, 302, 303, 307, 308].contains(status), let location = head.headers.first(name: "Location") {
            guard handler.redirectsLeft > 0 else {
                return fail(MediaError(kind: .openFailed, message: "more than \(SourceNetwork.maxRedirects) redirects"))
            }
            guard let next = URL(string: location, relativeTo: URL(string: handler.target))?.absoluteString else {
                return fail(MediaError(kind: .openFailed, message: "a redirect to \"\(location)\", which is not a URL"))
            }
            attempt += 1
            channel?.close(promise: nil)
            channel = nil
            return open(next, redirectsLeft: handler.redirectsLeft - 1, attempt: attempt)
        }
        switch status {
        case 200:
            skip = offset
            if let length = head.headers.first(name: "Content-Length").flatMap(Int64.init), length >= 0 { size = length }
        case 206:
            let range = head.headers.first(name: "Content-Range").flatMap(Self.contentRange)
            guard let range, range.first <= offset else {
                return fail(MediaError(kind: .readFailed, message: "the server answered a range other than the one asked for"))
            }
            skip = offset - range.first
            if let total = range.total { size = total }
        case 416 where offset > 0:
            finished = true
            channel?.close(promise: nil)
            return sink?.fetchEnded(epoch: epoch) ?? ()
        case 500...599:
            return retry(after: "the server answered \(status) \(head.status.reasonPhrase)")
        default:
            return fail(MediaError(kind: .openFailed, message: "the server answered \(status) \(head.status.reasonPhrase)"))
        }
        lastProgress = .now()
        sink?.fetchStarted(size: size, at: offset, epoch: epoch)
    }

    fileprivate func readComplete(attempt mine: UInt64) {
        guard mine == attempt, !stopped, !paused, !finished else { return }
        channel?.read()
    }

    fileprivate func closed(attempt mine: UInt64, error: (any Error)?) {
        guard mine == attempt, !stopped, !finished else { return }
        channel = nil
        retry(after: error.map { "the connection failed: \($0)" } ?? "the server closed the connection")
    }

    // MARK: Failures

    private func checkForStall() {
        guard !stopped, !finished, !paused else { return }
        guard NIODeadline.now() - lastProgress > network.stallTimeout else { return }
        retry(after: "nothing arrived for \(network.stallTimeout.nanoseconds / 1_000_000_000) s")
    }

    /// Reopens at `offset` after a pause that grows with each failure in a row; after
    /// `maxReconnects` of them the source has failed.
    private func retry(after reason: String) {
        attempt += 1
        channel?.close(promise: nil)
        channel = nil
        failedInARow += 1
        guard failedInARow <= maxReconnects else {
            return fail(MediaError(kind: .readFailed, message: reason))
        }
        sink?.fetchReconnecting(epoch: epoch)
        let mine = attempt
        lastProgress = .now() + .milliseconds(Int64(100 * failedInARow))
        loop.scheduleTask(in: .milliseconds(Int64(100 * failedInARow))) {
            guard mine == self.attempt, !self.stopped else { return }
            self.connect(at: self.offset)
        }
    }

    private func fail(_ error: MediaError) {
        attempt += 1
        finished = true
        channel?.close(promise: nil)
        channel = nil
        sink?.fetchFailed(error, epoch: epoch)
    }

    /// `bytes a-b/total` (total may be `*`).
    static func contentRange(_ value: String) -> (first: Int64, total: Int64?)? {
        guard value.hasPrefix("bytes ") else { return nil }
        let parts = value.dropFirst(6).split(separator: "/", maxSplits: 1)
        guard parts.count == 2, let first = parts[0].split(separator: "-").first.flatMap({ Int64($0) }), first >= 0 else {
            return nil
        }
        return (first, Int64(parts[1]).flatMap { $0 >= 0 ? $0 : nil })
    }
}

/// Sends the request and hands each part of the response to its fetch.
///
/// `@unchecked Sendable`: used on its channel's event loop only, which is the fetch's.
private final class ResponseHandler: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    let fetch: HTTPSourceFetch
    let attempt: UInt64
    let request: HTTPRequestHead
    let target: String
    let redirectsLeft: Int
    private var failure: (any Error)?

    init(fetch: HTTPSourceFetch, attempt: UInt64, request: HTTPRequestHead, target: String, redirectsLeft: Int) {
        self.fetch = fetch
        self.attempt = attempt
        self.request = request
        self.target = target
        self.redirectsLeft = redirectsLeft
    }

    func channelActive(context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.head(request)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        fetch.received(unwrapInboundIn(data), attempt: attempt, handler: self)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        fetch.readComplete(attempt: attempt)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failure = failure ?? error
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fetch.closed(attempt: attempt, error: failure)
    }
}

