// RTP framing of the packets a voice connection sends: what Discord's voice server and every
// listener's client read from the first 12 bytes.
import Testing

@testable import DiscordVoice

struct RTPStreamTests {
    @Test func theHeaderCarriesVersionTwoOpusTheSequenceTheTimestampAndTheSSRC() {
        var stream = RTPStream(ssrc: 0xDEAD_BEEF, sequence: 0x1234, timestamp: 0x0102_0304)
        #expect(stream.nextHeader() == [0x80, 0x78, 0x12, 0x34, 0x01, 0x02, 0x03, 0x04, 0xDE, 0xAD, 0xBE, 0xEF])
        #expect(stream.nextHeader() == [0x80, 0x78, 0x12, 0x35, 0x01, 0x02, 0x06, 0xC4, 0xDE, 0xAD, 0xBE, 0xEF])
    }

    @Test func sequenceAndTimestampWrapAround() {
        var stream = RTPStream(ssrc: 1, sequence: .max, timestamp: .max - 959)
        _ = stream.nextHeader()
        #expect(stream.sequence == 0 && stream.timestamp == 0)
        _ = stream.nextHeader()
        #expect(stream.sequence == 1 && stream.timestamp == 960)
    }

    @Test func skippedFramesMoveTheTimestampButNotTheSequence() {
        var stream = RTPStream(ssrc: 1, sequence: 10, timestamp: 0)
        stream.skip(frames: 50)
        #expect(stream.sequence == 10 && stream.timestamp == 48_000)
    }
}
