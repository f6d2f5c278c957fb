// A session's HLS output, as a value: its Opus packets cut into 2 s fMP4 segments (100 packets),
// the last few kept, and the live playlist that names them. Written once per session whatever
// the number of listeners: every listener is served these same bytes (and a CDN can cache them).
//
// Track changes are in the playlist as `EXT-X-DATERANGE` tags at the moment in the stream the new
// track starts (its first packet), each with the segments' `EXT-X-PROGRAM-DATE-TIME` as the clock.
// A pause or a stop ends the segment being cut (it is shorter), and what comes after it is marked
// `EXT-X-DISCONTINUITY` (a gapless join or a crossfade is neither: `HLSOutput` tells them apart);
// `EXT-X-DISCONTINUITY-SEQUENCE` counts the discontinuities that have left the playlist (RFC 8216
// §6.2.2); a session that stays silent `endAfter` says so with `EXT-X-ENDLIST`.
import Foundation
import NIOCore

struct HLSStream {
    static let packetsPerSegment = 100
    /// Segments kept for listeners (the playlist names all but the one being cut).
    static let kept = 6
    static let targetDurationSeconds = 2

    struct Segment {
        let sequence: UInt32
        let data: ByteBuffer
        let packets: Int
        /// Wall-clock ms of its first packet (its `EXT-X-PROGRAM-DATE-TIME`).
        let startMS: Int64
        /// It follows a pause or a stop.
        let discontinuity: Bool
    }

    /// A track's start: where in the stream (wall-clock ms, on the segments' clock) and its names.
    struct TrackStart: Equatable {
        let id: UInt64
        let startMS: Int64
        let title: String?
        let artist: String?
    }

    private(set) var segments: [Segment] = []
    private(set) var tracks: [TrackStart] = []
    private var pending: [ByteBuffer] = []
    private var pendingStartMS: Int64?
    private var nextSequence: UInt32 = 1
    /// Discontinuities whose segments have left the playlist.
    private(set) var discontinuitySequence: UInt32 = 0
    private var decodeTime: UInt64 = 0
    private var nextTrackID: UInt64 = 1
    /// The next segment follows a gap.
    private var afterGap = false
    /// A track started: it is placed at the next packet.
    private var startingTrack: (title: String?, artist: String?)?
    /// No packet for a while: the playlist ends (`EXT-X-ENDLIST`) until one comes.
    private(set) var ended = false
    /// Counts the changes to the playlist, so a rendered playlist can be kept until the next.
    private(set) var revision: UInt64 = 0

    /// A packet of the session at wall-clock `nowMS`. Its time in the stream is the segment's
    /// start plus 20 ms per packet before it, so the stream's clock does not drift with arrivals.
    mutating func append(_ packet: ByteBuffer, nowMS: Int64) {
        if ended {
            ended = false
            afterGap = true
            revision &+= 1
        }
        let start = pendingStartMS ?? nowMS
        pendingStartMS = start
        if let starting = startingTrack {
            let at = start + Int64(pending.count) * 20
            tracks.append(TrackStart(id: nextTrackID, startMS: at, title: starting.title, artist: starting.artist))
            nextTrackID += 1
            startingTrack = nil
        }
        pending.append(packet)
        if pending.count == Self.packetsPerSegment { cut() }
    }

    /// A track starts with the next packet (its `ready`).
    mutating func trackStarted(title: String?, artist: String?) {
        startingTrack = (title, artist)
    }

    /// The session paused or stopped: the segment being cut ends here, and what follows is marked
    /// as after a gap.
    mutating func gap() {
        if !pending.isEmpty { cut() }
        afterGap = true
    }

    /// The session has been silent long enough to call the stream over.
    mutating func end() {
        gap()
        ended = true
        revision &+= 1
    }

    private mutating func cut() {
        guard let start = pendingStartMS else { return }
        revision &+= 1
        let data = FragmentedOpus.segment(pending, sequence: nextSequence, decodeTime: decodeTime)
        segments.append(Segment(sequence: nextSequence, data: data, packets: pending.count, startMS: start, discontinuity: afterGap))
        decodeTime += UInt64(pending.count) * UInt64(FragmentedOpus.samplesPerPacket)
        nextSequence &+= 1
        pending.removeAll(keepingCapacity: true)
        pendingStartMS = nil
        afterGap = false
        if segments.count > Self.kept {
            let leaving = segments.count - Self.kept
            discontinuitySequence &+= UInt32(segments.prefix(leaving).filter(\.discontinuity).count)
            segments.removeFirst(leaving)
        }
        // Track starts before the oldest segment kept are no longer in any playlist.
        if let oldest = segments.first?.startMS {
            let current = tracks.last?.id
            tracks.removeAll { $0.startMS < oldest && $0.id != current }
        }
    }

    /// The segment numbered `sequence`, while it is kept.
    func segment(_ sequence: UInt32) -> ByteBuffer? {
        segments.first { $0.sequence == sequence }?.data
    }

    /// The live playlist (HLS version 7: fMP4 segments behind `EXT-X-MAP`); `query` (a
    /// listener's `token=…`, or empty) goes on every URI in it, since a player asks for them as
    /// written.
    func playlist(query: String = "") -> String {
        let suffix = query.isEmpty ? "" : "?" + query
        var lines = [
            "#EXTM3U", "#EXT-X-VERSION:7", "#EXT-X-TARGETDURATION:\(Self.targetDurationSeconds)",
            "#EXT-X-MEDIA-SEQUENCE:\(segments.first?.sequence ?? nextSequence)",
            "#EXT-X-DISCONTINUITY-SEQUENCE:\(discontinuitySequence)",
            #"#EXT-X-MAP:URI="init.mp4\#(suffix)""#,
        ]
        // The track playing since before the oldest segment kept: a player joining now still
        // learns its title (its start date is before the playlist's first date).
        for track in tracks where track.startMS < (segments.first?.startMS ?? .max) && !segments.isEmpty {
            lines.append(Self.dateRange(track))
        }
        for segment in segments {
            if segment.discontinuity { lines.append("#EXT-X-DISCONTINUITY") }
            lines.append("#EXT-X-PROGRAM-DATE-TIME:\(Self.date(segment.startMS))")
            let end = segment.startMS + Int64(segment.packets) * 20
            for track in tracks where track.startMS >= segment.startMS && track.startMS < end {
                lines.append(Self.dateRange(track))
            }
            let milliseconds = segment.packets * 20
            lines.append("#EXTINF:\(milliseconds / 1000).\(Self.digits(milliseconds % 1000, 3)),")
            lines.append("\(segment.sequence).m4s\(suffix)")
        }
        if ended { lines.append("#EXT-X-ENDLIST") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A track change as a date range: its start on the stream's clock, and its names.
    static func dateRange(_ track: TrackStart) -> String {
        var attributes = [#"ID="track-\#(track.id)""#, #"CLASS="com.tonearm.track""#, #"START-DATE="\#(date(track.startMS))""#]
        if let title = track.title { attributes.append(#"X-TITLE="\#(quoted(title))""#) }
        if let artist = track.artist { attributes.append(#"X-ARTIST="\#(quoted(artist))""#) }
        return "#EXT-X-DATERANGE:" + attributes.joined(separator: ",")
    }

    /// A quoted-string attribute may hold neither `"` nor a line break (RFC 8216 §4.2).
    static func quoted(_ text: String) -> String {
        String(text.map { $0 == "\"" ? "'" : ($0.isNewline ? " " : $0) })
    }

    /// `ms` since 1970 as an ISO 8601 UTC date with milliseconds (`2026-11-26T17:00:13.769Z`),
    /// computed rather than through a date formatter, which costs tens of microseconds to make.
    static func date(_ ms: Int64) -> String {
        let (days, dayMS) = (ms.floorDivided(by: 86_400_000), ms.floorModulo(86_400_000))
        // Days since 1970-01-01 to the civil date (H. Hinnant's algorithm, proleptic Gregorian).
        let z = days + 719_468
        let era = z.floorDivided(by: 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let seconds = dayMS / 1000
        return "\(digits(year, 4))-\(digits(month, 2))-\(digits(day, 2))T\(digits(seconds / 3600, 2)):"
            + "\(digits(seconds / 60 % 60, 2)):\(digits(seconds % 60, 2)).\(digits(dayMS % 1000, 3))Z"
    }

    /// `value` with leading zeros to `width` digits.
    static func digits(_ value: some BinaryInteger, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }
}

extension Int64 {
    /// Division rounding towards negative infinity (a date before 1970 still lands on its day).
    fileprivate func floorDivided(by divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }

    fileprivate func floorModulo(_ divisor: Int64) -> Int64 { self - floorDivided(by: divisor) * divisor }
}
