// Deadlines for an HTTP connection that holds a place without doing its part: a request head
// must be complete within `headTimeout` of the connection opening (a client sending it a byte a
// second — slowloris — or nothing at all is cut), and each later one within `idleTimeout` of the
// previous answer (an idle keep-alive connection is cut, however slowly it dribbles). A request
// being answered has no deadline here (an Ogg stream lasts as long as its listener), and a
// WebSocket leaves them behind at its upgrade (its pings keep it honest).
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

/// Puts `FirstRequestDeadline` in front of `Base`'s own setup (after TLS, when `Base` is wrapped
/// in it, so it reads the request's plain bytes).
struct RequestDeadlineChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let headTimeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(FirstRequestDeadline(timeout: headTimeout))
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// Closes the connection unless a complete request head (its blank line) arrives within
/// `timeout` of it opening; then steps aside.
///
/// `@unchecked Sendable`: used on its channel's event loop only.
final class FirstRequestDeadline: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?
    /// How much of "\r\n\r\n" the bytes so far end with.
    private var matched = 0
    private static let blankLine: [UInt8] = Array("\r\n\r\n".utf8)

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        timer = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data)
        var complete = false
        for byte in bytes.readableBytesView {
            matched = byte == Self.blankLine[matched] ? matched + 1 : (byte == Self.blankLine[0] ? 1 : 0)
            if matched == Self.blankLine.count {
                complete = true
                break
            }
        }
        context.fireChannelRead(data)
        if complete { context.pipeline.syncOperations.removeHandler(context: context, promise: nil) }
    }
}

/// Closes a keep-alive connection whose next request head has not arrived within `timeout` of the
/// previous answer's end. Among the HTTP handlers, which the server adds after the first head.
///
/// `@unchecked Sendable`: used on its channel's event loop only.
final class NextRequestDeadline: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) {
            timer?.cancel()
            timer = nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            let channel = context.channel
            timer?.cancel()
            timer = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        }
        context.write(data, promise: promise)
    }
}
