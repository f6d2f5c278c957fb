// The link to tonearm-dave (bridges/dave/tonearm_dave.py), the process beside each pair that does
// DAVE for this Router's voice connections with davey: the MLS group's side (key package,
// proposals, commit and welcome, transitions) and the encryption of every Opus frame. davey gives
// out no key material, so the frames themselves go there and back; the RTP, the transport
// encryption and the sending stay here.
//
// One Unix socket connection for all voice connections, every message both ways
// `u32 length | u8 kind | u32 voice connection id | payload` (the kinds are tonearm_dave.py's).
// Frames are answered in the order they were asked, per voice connection, so each connection
// keeps a queue of what to do with the answers. The socket is made again when it ends; every
// voice connection that had DAVE then hears `.lost` and the frames asked meanwhile are dropped.
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

public final class DaveSidecar: Sendable {
    /// What the process says to one voice connection.
    public enum Message: Sendable, Equatable {
        /// A binary message for the voice gateway: the opcode byte, then its data.
        case sendBinary([UInt8])
        case sendText(String)
        /// The group is ready (frames are encrypted) or not; the call's privacy code when ready.
        case state(ready: Bool, privacyCode: String?)
        /// The process went away: this connection's DAVE session is gone with it.
        case lost
    }

    enum Kind: UInt8 {
        case open = 1, binary, json, encrypt, close
        case sendBinary = 101, sendJSON, state, frame
    }

    public let path: String
    private let logger: Logger
    private let group: any EventLoopGroup
    private let state = Mutex(State())
    private let ids = Atomic<UInt32>(0)
    /// Set while a flush is queued on the socket's loop (read and written only there): the
    /// frames of one 20 ms tick (one per guild) go out in one write.
    private let flushQueued = Atomic<Bool>(false)

    struct State {
        var channel: (any Channel)?
        var handlers: [UInt32: @Sendable (Message) -> Void] = [:]
        /// Per voice connection, what to do with each frame the process has yet to answer.
        var awaiting: [UInt32: [@Sendable ([UInt8]?) -> Void]] = [:]
        /// Voice connections whose DAVE session lives in the process.
        var opened: Set<UInt32> = []
    }

    static let maxMessage = 1 << 20

    public init(path: String, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger) {
        self.path = path
        self.group = group
        self.logger = logger
    }

    /// The DAVE protocol version this side offers in Identify.
    public var maxProtocolVersion: Int { 1 }

    /// Keeps the socket to the process until the task is cancelled, making it again 0.5 s after
    /// it ends or fails.
    public func run() async {
        while !Task.isCancelled {
            do {
                let channel = try await ClientBootstrap(group: group)
                    .channelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(Frames()))
                            try channel.pipeline.syncOperations.addHandler(Inbound(sidecar: self))
                        }
                    }
                    .connect(unixDomainSocketPath: path).get()
                state.withLock { $0.channel = channel }
                logger.info("connected to tonearm-dave", metadata: ["socket": "\(path)"])
                try? await withTaskCancellationHandler {
                    try await channel.closeFuture.get()
                } onCancel: {
                    channel.close(promise: nil)
                }
                logger.warning("tonearm-dave's socket closed", metadata: ["socket": "\(path)"])
            } catch {
                logger.debug("tonearm-dave is not reachable", metadata: ["socket": "\(path)", "error": "\(error)"])
            }
            lost()
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    /// A new id for a voice connection, and where the process's messages for it go.
    public func attach(_ handler: @escaping @Sendable (Message) -> Void) -> UInt32 {
        let id = ids.add(1, ordering: .relaxed).newValue
        state.withLock { $0.handlers[id] = handler }
        return id
    }

    /// The voice connection ended: its DAVE session is dropped.
    public func detach(_ id: UInt32) {
        let (channel, waiting, opened) = state.withLock { state in
            state.handlers[id] = nil
            return (state.channel, state.awaiting.removeValue(forKey: id) ?? [], state.opened.remove(id) != nil)
        }
        for answer in waiting { answer(nil) }
        if opened, let channel { write(.close, id, [], on: channel) }
    }

    /// A Session Description said DAVE: a session for this user in this channel (the process
    /// answers with the key package to send). False when the process is not reachable.
    @discardableResult
    public func open(_ id: UInt32, userID: String, channelID: String, protocolVersion: Int) -> Bool {
        let body = #"{"user_id":"\#(userID.filter(\.isNumber))","channel_id":"\#(channelID.filter(\.isNumber))","protocol_version":\#(protocolVersion)}"#
        guard let channel = state.withLock({ state -> (any Channel)? in
            guard let channel = state.channel else { return nil }
            state.opened.insert(id)
            return channel
        }) else { return false }
        write(.open, id, Array(body.utf8), on: channel)
        return true
    }

    /// A binary message from the voice gateway (DAVE's ops 25, 27, 29, 30).
    public func forward(_ id: UInt32, binary: [UInt8]) {
        guard let channel = openedChannel(id) else { return }
        write(.binary, id, binary, on: channel)
    }

    /// A JSON message from the voice gateway (DAVE's ops 21, 22, 24).
    public func forward(_ id: UInt32, text: String) {
        guard let channel = openedChannel(id) else { return }
        write(.json, id, Array(text.utf8), on: channel)
    }

    /// One Opus frame to encrypt: `then` gets the DAVE frame, or nil when there is none to send
    /// (the group is not ready, the process is not reachable). Answers come in the order asked.
    public func encrypt(_ id: UInt32, frame: [UInt8], then: @escaping @Sendable ([UInt8]?) -> Void) {
        let channel = state.withLock { state -> (any Channel)? in
            guard let channel = state.channel, state.opened.contains(id) else { return nil }
            state.awaiting[id, default: []].append(then)
            // Written under the lock: the order of the queue is the order on the socket.
            write(.encrypt, id, frame, on: channel)
            return channel
        }
        if channel == nil { then(nil) }
    }

    private func openedChannel(_ id: UInt32) -> (any Channel)? {
        state.withLock { $0.opened.contains(id) ? $0.channel : nil }
    }

    private func write(_ kind: Kind, _ id: UInt32, _ payload: [UInt8], on channel: any Channel) {
        var buffer = channel.allocator.buffer(capacity: 9 + payload.count)
        buffer.writeInteger(UInt32(5 + payload.count))
        buffer.writeInteger(kind.rawValue)
        buffer.writeInteger(id)
        buffer.writeBytes(payload)
        let loop = channel.eventLoop
        // On the loop: the write, and a flush queued behind it unless one is queued already (a
        // flag read off the loop could miss a write that lands after a queued flush ran).
        let written = { [self] in
            channel.write(buffer, promise: nil)
            guard !flushQueued.load(ordering: .relaxed) else { return }
            flushQueued.store(true, ordering: .relaxed)
            loop.execute {
                self.flushQueued.store(false, ordering: .relaxed)
                channel.flush()
            }
        }
        if loop.inEventLoop { written() } else { loop.execute(written) }
    }

    /// The socket ended: every frame waiting is dropped, every opened session hears `.lost`.
    private func lost() {
        let (waiting, handlers) = state.withLock { state in
            defer {
                state.channel = nil
                state.awaiting = [:]
                state.opened = []
            }
            return (state.awaiting.values.flatMap { $0 }, state.opened.compactMap { state.handlers[$0] })
        }
        for answer in waiting { answer(nil) }
        for handler in handlers { handler(.lost) }
    }

    /// One message from the process.
    func received(kind: UInt8, id: UInt32, payload: ByteBuffer) {
        let bytes = Array(payload.readableBytesView)
        switch Kind(rawValue: kind) {
        case .frame:
            let answer = state.withLock { state -> (@Sendable ([UInt8]?) -> Void)? in
                guard var queue = state.awaiting[id], !queue.isEmpty else { return nil }
                let first = queue.removeFirst()
                state.awaiting[id] = queue
                return first
            }
            answer?(bytes.isEmpty ? nil : bytes)
        case .sendBinary:
            handler(id)?(.sendBinary(bytes))
        case .sendJSON:
            handler(id)?(.sendText(String(decoding: bytes, as: UTF8.self)))
        case .state:
            let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
            handler(id)?(.state(ready: object?["ready"] as? Bool ?? false, privacyCode: object?["privacy_code"] as? String))
        default:
            logger.warning("tonearm-dave sent a message of an unknown kind", metadata: ["kind": "\(kind)"])
        }
    }

    private func handler(_ id: UInt32) -> (@Sendable (Message) -> Void)? {
        state.withLock { $0.handlers[id] }
    }

    /// `u32 length | u8 kind | u32 id | payload` off the socket; a length out of bounds ends it.
    struct Frames: ByteToMessageDecoder {
        typealias InboundOut = (UInt8, UInt32, ByteBuffer)

        mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
            guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return .needMoreData }
            guard length >= 5, length <= DaveSidecar.maxMessage else { throw DaveSidecarError.badLength(Int(length)) }
            guard buffer.readableBytes >= 4 + Int(length) else { return .needMoreData }
            buffer.moveReaderIndex(forwardBy: 4)
            guard let kind = buffer.readInteger(as: UInt8.self), let id = buffer.readInteger(as: UInt32.self),
                let payload = buffer.readSlice(length: Int(length) - 5)
            else { throw DaveSidecarError.badLength(Int(length)) }
            context.fireChannelRead(Self.wrapInboundOut((kind, id, payload)))
            return .continue
        }
    }

    final class Inbound: ChannelInboundHandler, Sendable {
        typealias InboundIn = (UInt8, UInt32, ByteBuffer)
        let sidecar: DaveSidecar

        init(sidecar: DaveSidecar) { self.sidecar = sidecar }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let (kind, id, payload) = Self.unwrapInboundIn(data)
            sidecar.received(kind: kind, id: id, payload: payload)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            sidecar.logger.warning("tonearm-dave's socket failed", metadata: ["error": "\(error)"])
            context.close(promise: nil)
        }
    }
}

enum DaveSidecarError: Error, CustomStringConvertible {
    case badLength(Int)

    var description: String {
        switch self {
        case .badLength(let length): "a message from tonearm-dave of \(length) bytes"
        }
    }
}
