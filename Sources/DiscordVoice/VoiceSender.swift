// What one connected voice session puts on UDP, as a value: each Opus frame sealed in its RTP
// packet, five frames of Opus silence when the audio stops (Discord's documented way to end a
// burst without the listeners' decoders interpolating), and when to say Speaking (op 5).
//
// The audio stops when no frame came for `quietAfter`: a pause, a stop, the queue's end, or
// frames lost on the way. The silence frames then go one per tick (every 20 ms), then Speaking 0.
// When audio comes back, the RTP timestamp moves on by the time that passed, so the listeners'
// jitter buffers hear it as time and not as a glitch; sequence numbers stay one per packet.

/// One voice session's outgoing audio.
public struct VoiceSender: Sendable {
    /// An Opus frame of silence (Discord's documentation: 0xF8 0xFF 0xFE).
    public static let silenceFrame: [UInt8] = [0xF8, 0xFF, 0xFE]
    public static let silenceFrames = 5
    /// Audio counts as stopped after this long without a frame: longer than the Router's usual
    /// jitter in handing frames on, so a late frame is not mistaken for the end.
    public static let quietAfter: Duration = .milliseconds(100)
    public static let frameDuration: Duration = .milliseconds(20)

    public let session: VoiceSession
    private var stream: RTPStream
    private var cipher: TransportCipher
    public private(set) var speaking = false
    private var silenceLeft = 0
    private var lastFrame: ContinuousClock.Instant?
    private var lastPacket: ContinuousClock.Instant?
    /// Packets sent, silence frames among them.
    public private(set) var packetsSent: UInt64 = 0

    /// What to do now: Speaking to send first (`speaking == true`) or after the packets (`false`).
    public struct Output: Equatable, Sendable {
        public var packets: [[UInt8]] = []
        public var speaking: Bool?
    }

    public init(session: VoiceSession, stream: RTPStream? = nil) throws(TransportCipherError) {
        self.session = session
        self.stream = stream ?? RTPStream(ssrc: session.ssrc)
        self.cipher = try TransportCipher(mode: session.mode, secretKey: session.secretKey)
    }

    /// One Opus frame of the session's audio.
    public mutating func frame(_ opus: [UInt8], now: ContinuousClock.Instant) -> Output {
        var output = Output()
        if !speaking {
            speaking = true
            output.speaking = true
            if let lastPacket {
                // Frames not sent while quiet: the timestamp moves on by them.
                let missed = Int((now - lastPacket) / Self.frameDuration) - 1
                if missed > 0 { stream.skip(frames: UInt32(clamping: missed)) }
            }
        }
        silenceLeft = Self.silenceFrames
        lastFrame = now
        output.packets = seal(opus, now: now)
        return output
    }

    /// Called every 20 ms: the silence frames once the audio has stopped.
    public mutating func tick(now: ContinuousClock.Instant) -> Output {
        guard speaking, let lastFrame, now - lastFrame >= Self.quietAfter, silenceLeft > 0 else { return Output() }
        silenceLeft -= 1
        var output = Output(packets: seal(Self.silenceFrame, now: now))
        if silenceLeft == 0 {
            speaking = false
            output.speaking = false
        }
        return output
    }

    private mutating func seal(_ payload: [UInt8], now: ContinuousClock.Instant) -> [[UInt8]] {
        lastPacket = now
        // The header is always 12 bytes, so sealing cannot fail; a packet it could not seal is
        // not sent rather than sent clear.
        guard let packet = try? cipher.seal(header: stream.nextHeader(), payload: payload) else { return [] }
        packetsSent &+= 1
        return [packet]
    }
}
