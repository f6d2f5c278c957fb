// WebSocket frames as bytes, built once per message for every client of a loop.
import NIOCore

/// The WebSocket frame bytes of a message (RFC 6455 §5.2, server to client: no mask).
package enum WebSocketWire {
    package static func frame(_ message: ClientMessage, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        switch message {
        case .audio(let payload):
            return frame(opcode: 0x2, payload: payload.readableBytesView, allocator: allocator)
        case .event(let text):
            return frame(opcode: 0x1, payload: text.utf8, allocator: allocator)
        }
    }

    /// A close frame with `code` and `reason` (the reason cut to fit a control frame's 125 bytes).
    static func close(code: UInt16, reason: String) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.writeInteger(code)
        payload.writeBytes(reason.utf8.prefix(123))
        return frame(opcode: 0x8, payload: payload.readableBytesView, allocator: ByteBufferAllocator())
    }

    static func frame(opcode: UInt8, payload: some Collection<UInt8>, allocator: ByteBufferAllocator) -> ByteBuffer {
        let count = payload.count
        var buffer = allocator.buffer(capacity: count + 10)
        buffer.writeInteger(0x80 | opcode)
        if count < 126 {
            buffer.writeInteger(UInt8(count))
        } else if count <= Int(UInt16.max) {
            buffer.writeInteger(UInt8(126))
            buffer.writeInteger(UInt16(count))
        } else {
            buffer.writeInteger(UInt8(127))
            buffer.writeInteger(UInt64(count))
        }
        buffer.writeBytes(payload)
        return buffer
    }
}
