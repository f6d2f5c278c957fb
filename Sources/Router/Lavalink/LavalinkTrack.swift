// A track as Lavalink clients hold it: `encoded`, lavaplayer's binary track format in base64, and
// `info`, the same fields as JSON. Several clients decode `encoded` themselves, so Tonearm writes
// exactly what lavaplayer writes (version 3): a 32-bit header (flag bit 30, then the size of what
// follows), the version byte, then title, author, length, identifier, isStream, uri, artworkUrl,
// isrc, sourceName, the source's own fields (`http` and `local`: the container probed), and the
// position. Strings are Java's modified UTF-8 behind a 16-bit length (`DataOutput.writeUTF`).
//
// `encoded` comes back from clients and is untrusted: decoding checks every length against what
// is left and gives a typed error, never a trap.
import Foundation

struct LavalinkTrackInfo: Codable, Sendable, Equatable {
    var identifier: String
    var isSeekable: Bool
    var author: String
    var length: Int64
    var isStream: Bool
    var position: Int64
    var title: String
    var uri: String?
    var artworkUrl: String?
    var isrc: String?
    var sourceName: String

    /// The URL Tonearm plays for this track.
    var playable: String { uri ?? identifier }

    // `uri`, `artworkUrl` and `isrc` are written as null, as Lavalink does.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(identifier, forKey: .identifier)
        try container.encode(isSeekable, forKey: .isSeekable)
        try container.encode(author, forKey: .author)
        try container.encode(length, forKey: .length)
        try container.encode(isStream, forKey: .isStream)
        try container.encode(position, forKey: .position)
        try container.encode(title, forKey: .title)
        try container.encode(uri, forKey: .uri)
        try container.encode(artworkUrl, forKey: .artworkUrl)
        try container.encode(isrc, forKey: .isrc)
        try container.encode(sourceName, forKey: .sourceName)
    }
}

enum LavalinkTrackCodec {
    struct Unreadable: Error, CustomStringConvertible {
        let description: String
    }

    /// What the `http` and `local` sources add after the source name: the container probed.
    static let probedSources: Set<String> = ["http", "local"]

    static func encode(_ info: LavalinkTrackInfo, probeInfo: String = "") -> String {
        var body: [UInt8] = [3]
        writeUTF(info.title, to: &body)
        writeUTF(info.author, to: &body)
        writeInt64(info.length, to: &body)
        writeUTF(info.identifier, to: &body)
        body.append(info.isStream ? 1 : 0)
        for optional in [info.uri, info.artworkUrl, info.isrc] {
            body.append(optional == nil ? 0 : 1)
            if let optional { writeUTF(optional, to: &body) }
        }
        writeUTF(info.sourceName, to: &body)
        if probedSources.contains(info.sourceName) { writeUTF(probeInfo, to: &body) }
        writeInt64(info.position, to: &body)
        let header = UInt32(1 << 30) | UInt32(truncatingIfNeeded: body.count)
        let bytes = withUnsafeBytes(of: header.bigEndian) { Array($0) } + body
        return Data(bytes).base64EncodedString()
    }

    /// Reads an `encoded` track of version 1, 2 or 3.
    static func decode(_ encoded: String) throws(Unreadable) -> LavalinkTrackInfo {
        guard let data = Data(base64Encoded: encoded) else { throw Unreadable(description: "not base64") }
        var reader = Reader(bytes: Array(data))
        let header = try reader.uint32()
        let size = Int(header & 0x3FFF_FFFF)
        guard size == reader.remaining else {
            throw Unreadable(description: "the header says \(size) bytes follow, \(reader.remaining) do")
        }
        let version = header & (1 << 30) != 0 ? try reader.byte() : 1
        guard (1...3).contains(version) else { throw Unreadable(description: "track format version \(version) is unknown") }
        let title = try reader.utf()
        let author = try reader.utf()
        let length = try reader.int64()
        let identifier = try reader.utf()
        let isStream = try reader.byte() != 0
        let uri = version >= 2 ? try reader.nullableUTF() : nil
        let artworkUrl = version >= 3 ? try reader.nullableUTF() : nil
        let isrc = version >= 3 ? try reader.nullableUTF() : nil
        let sourceName = try reader.utf()
        // A source's own fields sit between the source name and the position, which ends the track.
        guard reader.remaining >= 8 else { throw Unreadable(description: "the track ends before its position") }
        reader.skip(to: reader.bytes.count - 8)
        let position = try reader.int64()
        guard length >= 0, position >= 0 else { throw Unreadable(description: "a negative length or position") }
        return LavalinkTrackInfo(
            identifier: identifier, isSeekable: !isStream, author: author, length: length, isStream: isStream,
            position: position, title: title, uri: uri, artworkUrl: artworkUrl, isrc: isrc, sourceName: sourceName)
    }

    // MARK: Java's DataOutput

    /// `s` in modified UTF-8: NUL as two bytes, characters beyond the BMP as two 3-byte
    /// surrogates; cut (at a character) to the 65,535 bytes a 16-bit length holds.
    static func writeUTF(_ s: String, to out: inout [UInt8]) {
        var encoded: [UInt8] = []
        for unit in s.utf16 {
            let before = encoded.count
            switch unit {
            case 0x0001...0x007F: encoded.append(UInt8(unit))
            case 0x0000, 0x0080...0x07FF:
                encoded += [0xC0 | UInt8(unit >> 6), 0x80 | UInt8(unit & 0x3F)]
            default:
                encoded += [0xE0 | UInt8(unit >> 12), 0x80 | UInt8((unit >> 6) & 0x3F), 0x80 | UInt8(unit & 0x3F)]
            }
            if encoded.count > 0xFFFF {
                encoded.removeSubrange(before...)
                break
            }
        }
        out += [UInt8(encoded.count >> 8), UInt8(encoded.count & 0xFF)] + encoded
    }

    static func writeInt64(_ value: Int64, to out: inout [UInt8]) {
        out += withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }

    struct Reader {
        let bytes: [UInt8]
        var offset = 0
        var remaining: Int { bytes.count - offset }

        mutating func take(_ count: Int) throws(Unreadable) -> ArraySlice<UInt8> {
            guard count >= 0, count <= remaining else { throw Unreadable(description: "the track ends early") }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }

        mutating func skip(to position: Int) { offset = max(offset, min(position, bytes.count)) }
        mutating func byte() throws(Unreadable) -> UInt8 { try take(1).first ?? 0 }

        mutating func uint32() throws(Unreadable) -> UInt32 {
            try take(4).reduce(0) { $0 << 8 | UInt32($1) }
        }

        mutating func int64() throws(Unreadable) -> Int64 {
            Int64(bitPattern: try take(8).reduce(0) { $0 << 8 | UInt64($1) })
        }

        mutating func nullableUTF() throws(Unreadable) -> String? {
            try byte() != 0 ? try utf() : nil
        }

        /// Modified UTF-8 read back into UTF-16 code units; a malformed sequence is an error.
        mutating func utf() throws(Unreadable) -> String {
            let count = Int(try take(2).reduce(0) { $0 << 8 | UInt16($1) })
            let raw = Array(try take(count))
            var units: [UInt16] = []
            var index = 0
            while index < raw.count {
                let first = raw[index]
                switch first {
                case 0x01...0x7F:
                    units.append(UInt16(first))
                    index += 1
                case 0xC0...0xDF where index + 1 < raw.count && raw[index + 1] & 0xC0 == 0x80:
                    units.append(UInt16(first & 0x1F) << 6 | UInt16(raw[index + 1] & 0x3F))
                    index += 2
                case 0xE0...0xEF where index + 2 < raw.count && raw[index + 1] & 0xC0 == 0x80 && raw[index + 2] & 0xC0 == 0x80:
                    units.append(UInt16(first & 0x0F) << 12 | UInt16(raw[index + 1] & 0x3F) << 6 | UInt16(raw[index + 2] & 0x3F))
                    index += 3
                default:
                    throw Unreadable(description: "a string is not modified UTF-8")
                }
            }
            return String(decoding: units, as: UTF16.self)
        }
    }
}
