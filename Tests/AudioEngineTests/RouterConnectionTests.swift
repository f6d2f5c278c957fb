import NIOCore
import NIOEmbedded
import Testing
import WireProtocol

@testable import AudioEngine

@Suite struct RouterConnectionTests {
    func tick(_ n: Int, event: Bool) throws -> TickBatch {
        var batch = TickBatch()
        if event { batch.append(WireEvent(type: .progress, sessionID: try SessionID("s"), positionMS: Int64(n))) }
        batch.append([UInt8(n)], for: try SessionID("s"))
        return batch
    }

    @Test func aFullSocketLosesTheAudioOfItsOldestTicksButKeepsEveryEventInOrder() throws {
        let channel = EmbeddedChannel()
        let connection = RouterConnection(channel: channel)
        try channel.pipeline.syncOperations.addHandler(WritabilityHandler(connection: connection))
        channel.isWritable = false
        var dropped = 0
        for n in 0..<15 { dropped += connection.enqueue(try tick(n, event: n % 5 == 0)) }
        channel.embeddedEventLoop.run()
        #expect(dropped == 5)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)

        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        var bytes = ByteBuffer()
        while var chunk = try channel.readOutbound(as: ByteBuffer.self) { bytes.writeBuffer(&chunk) }
        var processor = NIOSingleStepByteToMessageProcessor(WireMessageDecoder())
        var audio: [UInt8] = []
        var events: [Int64] = []
        try processor.process(buffer: bytes) { message in
            switch message {
            case .audio(let packet): audio.append(packet.payload.getInteger(at: packet.payload.readerIndex)!)
            case .event(let event, _): events.append(event.positionMS!)
            }
        }
        #expect(audio == Array(5..<15).map(UInt8.init))
        #expect(events == [0, 5, 10])
    }

    @Test func aConnectionThatReadsNothingForTenSecondsIsClosed() throws {
        let channel = EmbeddedChannel()
        try channel.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let connection = RouterConnection(channel: channel)
        channel.isWritable = false
        for n in 0...RouterConnection.maxStalledTicks { _ = connection.enqueue(try tick(n % 200, event: false)) }
        channel.embeddedEventLoop.run()
        #expect(!channel.isActive)
    }
}
