// Opus in fragmented MP4 (ISO/IEC 14496-12 with the Opus encapsulation of opus-codec.org's
// "Encapsulation of Opus in ISO Base Media File Format"): the session's own 20 ms packets, not
// re-encoded, as HLS serves them — one initialisation segment (`ftyp` + `moov` with an `Opus`
// sample entry and its `dOps`) and media segments (`moof` + `mdat`), each sample one packet of
// 960 samples at 48 kHz.
import NIOCore

enum FragmentedOpus {
    static let timescale: UInt32 = 48_000
    static let samplesPerPacket: UInt32 = 960
    static let trackID: UInt32 = 1

    /// `ftyp` and `moov`: what a player needs before the first media segment.
    static func initialization() -> ByteBuffer {
        var out = ByteBuffer()
        box("ftyp", into: &out) { b in
            b.writeString("iso6")
            b.writeInteger(UInt32(0))
            for brand in ["iso6", "cmfc", "mp41"] { b.writeString(brand) }
        }
        box("moov", into: &out) { moov in
            fullBox("mvhd", into: &moov) { b in
                b.writeInteger(UInt32(0))  // creation time
                b.writeInteger(UInt32(0))  // modification time
                b.writeInteger(timescale)
                b.writeInteger(UInt32(0))  // duration: a live stream's is unknown
                b.writeInteger(UInt32(0x0001_0000))  // rate 1.0
                b.writeInteger(UInt16(0x0100))  // volume 1.0
                b.writeRepeatingByte(0, count: 10)
                writeMatrix(&b)
                b.writeRepeatingByte(0, count: 24)  // pre_defined
                b.writeInteger(trackID + 1)  // next track id
            }
            box("trak", into: &moov) { trak in
                fullBox("tkhd", flags: 0x000003, into: &trak) { b in
                    b.writeInteger(UInt32(0))
                    b.writeInteger(UInt32(0))
                    b.writeInteger(trackID)
                    b.writeInteger(UInt32(0))  // reserved
                    b.writeInteger(UInt32(0))  // duration
                    b.writeRepeatingByte(0, count: 8)
                    b.writeInteger(UInt16(0))  // layer
                    b.writeInteger(UInt16(0))  // alternate group
                    b.writeInteger(UInt16(0x0100))  // volume: an audio track's is 1.0
                    b.writeInteger(UInt16(0))
                    writeMatrix(&b)
                    b.writeInteger(UInt32(0))  // width
                    b.writeInteger(UInt32(0))  // height
                }
                box("mdia", into: &trak) { mdia in
                    fullBox("mdhd", into: &mdia) { b in
                        b.writeInteger(UInt32(0))
                        b.writeInteger(UInt32(0))
                        b.writeInteger(timescale)
                        b.writeInteger(UInt32(0))
                        b.writeInteger(UInt16(0x55C4))  // language "und", packed
                        b.writeInteger(UInt16(0))
                    }
                    fullBox("hdlr", into: &mdia) { b in
                        b.writeInteger(UInt32(0))
                        b.writeString("soun")
                        b.writeRepeatingByte(0, count: 12)
                        b.writeString("Tonearm")
                        b.writeInteger(UInt8(0))
                    }
                    box("minf", into: &mdia) { minf in
                        fullBox("smhd", into: &minf) { b in b.writeInteger(UInt32(0)) }
                        box("dinf", into: &minf) { dinf in
                            fullBox("dref", into: &dinf) { b in
                                b.writeInteger(UInt32(1))
                                fullBox("url ", flags: 0x000001, into: &b) { _ in }  // the media is in this file
                            }
                        }
                        box("stbl", into: &minf) { stbl in
                            fullBox("stsd", into: &stbl) { b in
                                b.writeInteger(UInt32(1))
                                opusSampleEntry(into: &b)
                            }
                            // Every sample is in the fragments: the tables of the movie are empty.
                            for name in ["stts", "stsc", "stco"] {
                                fullBox(name, into: &stbl) { b in b.writeInteger(UInt32(0)) }
                            }
                            fullBox("stsz", into: &stbl) { b in
                                b.writeInteger(UInt32(0))
                                b.writeInteger(UInt32(0))
                            }
                        }
                    }
                }
            }
            box("mvex", into: &moov) { mvex in
                fullBox("trex", into: &mvex) { b in
                    b.writeInteger(trackID)
                    b.writeInteger(UInt32(1))  // sample description 1
                    b.writeInteger(samplesPerPacket)
                    b.writeInteger(UInt32(0))
                    b.writeInteger(UInt32(0))
                }
            }
        }
        return out
    }

    /// One media segment: `moof` + `mdat` with `packets`, the first decoded at `decodeTime`
    /// (in 48 kHz samples since the stream's start); `sequence` counts segments from 1.
    static func segment(_ packets: [ByteBuffer], sequence: UInt32, decodeTime: UInt64) -> ByteBuffer {
        var out = ByteBuffer()
        var dataOffsetAt = 0
        let moofStart = out.writerIndex
        box("moof", into: &out) { moof in
            fullBox("mfhd", into: &moof) { b in b.writeInteger(sequence) }
            box("traf", into: &moof) { traf in
                // default-base-is-moof, and a default duration: every sample is one 20 ms packet.
                fullBox("tfhd", flags: 0x02_0008, into: &traf) { b in
                    b.writeInteger(trackID)
                    b.writeInteger(samplesPerPacket)
                }
                fullBox("tfdt", version: 1, into: &traf) { b in b.writeInteger(decodeTime) }
                // data-offset and a size per sample.
                fullBox("trun", flags: 0x00_0201, into: &traf) { b in
                    b.writeInteger(UInt32(packets.count))
                    dataOffsetAt = b.writerIndex
                    b.writeInteger(Int32(0))
                    for packet in packets { b.writeInteger(UInt32(packet.readableBytes)) }
                }
            }
        }
        let moofSize = out.writerIndex - moofStart
        // The boxes are written in place in `out`, so the index taken inside `trun` is `out`'s:
        // the samples start right after `moof` and the `mdat` header.
        out.setInteger(Int32(moofSize + 8), at: dataOffsetAt)
        out.writeInteger(UInt32(8 + packets.reduce(0) { $0 + $1.readableBytes }))
        out.writeString("mdat")
        for var packet in packets { out.writeBuffer(&packet) }
        return out
    }

    /// The `Opus` sample entry (an AudioSampleEntry) with its `dOps`.
    private static func opusSampleEntry(into out: inout ByteBuffer) {
        box("Opus", into: &out) { b in
            b.writeRepeatingByte(0, count: 6)
            b.writeInteger(UInt16(1))  // data reference index
            b.writeRepeatingByte(0, count: 8)
            b.writeInteger(UInt16(2))  // channels
            b.writeInteger(UInt16(16))  // sample size
            b.writeInteger(UInt32(0))  // pre_defined, reserved
            b.writeInteger(timescale << 16)  // 48000.0 as 16.16
            box("dOps", into: &b) { d in
                d.writeInteger(UInt8(0))  // version
                d.writeInteger(UInt8(2))  // output channels
                d.writeInteger(UInt16(0))  // pre-skip: a live join has nothing to skip
                d.writeInteger(UInt32(48_000))  // input sample rate
                d.writeInteger(Int16(0))  // output gain
                d.writeInteger(UInt8(0))  // channel mapping family 0: mono or stereo
            }
        }
    }

    private static func writeMatrix(_ b: inout ByteBuffer) {
        for value: UInt32 in [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] { b.writeInteger(value) }
    }

    private static func box(_ type: String, into out: inout ByteBuffer, _ body: (inout ByteBuffer) -> Void) {
        let start = out.writerIndex
        out.writeInteger(UInt32(0))
        out.writeString(type)
        body(&out)
        out.setInteger(UInt32(out.writerIndex - start), at: start)
    }

    private static func fullBox(
        _ type: String, version: UInt8 = 0, flags: UInt32 = 0, into out: inout ByteBuffer, _ body: (inout ByteBuffer) -> Void
    ) {
        box(type, into: &out) { b in
            b.writeInteger(UInt32(version) << 24 | flags & 0x00FF_FFFF)
            body(&b)
        }
    }
}
