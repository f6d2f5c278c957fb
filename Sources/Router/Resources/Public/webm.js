// The smallest WebM writer Media Source Extensions accept for a live Opus stream: an
// initialisation segment (EBML header, a Segment of unknown size, Info, one Opus track), then one
// Cluster per batch of 20 ms packets, each packet a SimpleBlock. Times are in milliseconds.

const ID = {
  EBML: [0x1a, 0x45, 0xdf, 0xa3], EBMLVersion: [0x42, 0x86], EBMLReadVersion: [0x42, 0xf7],
  EBMLMaxIDLength: [0x42, 0xf2], EBMLMaxSizeLength: [0x42, 0xf3], DocType: [0x42, 0x82],
  DocTypeVersion: [0x42, 0x87], DocTypeReadVersion: [0x42, 0x85],
  Segment: [0x18, 0x53, 0x80, 0x67], Info: [0x15, 0x49, 0xa9, 0x66], TimecodeScale: [0x2a, 0xd7, 0xb1],
  MuxingApp: [0x4d, 0x80], WritingApp: [0x57, 0x41],
  Tracks: [0x16, 0x54, 0xae, 0x6b], TrackEntry: [0xae], TrackNumber: [0xd7], TrackUID: [0x73, 0xc5],
  TrackType: [0x83], CodecID: [0x86], CodecPrivate: [0x63, 0xa2], CodecDelay: [0x56, 0xaa],
  SeekPreRoll: [0x56, 0xbb], Audio: [0xe1], SamplingFrequency: [0xb5], Channels: [0x9f],
  Cluster: [0x1f, 0x43, 0xb6, 0x75], Timecode: [0xe7], SimpleBlock: [0xa3],
};

export const WEBM_OPUS = 'audio/webm; codecs="opus"';

export function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) { out.set(part, at); at += part.length; }
  return out;
}

/** An element size as an 8-byte EBML variable-length integer (valid for any size here). */
function size(n) {
  const out = new Uint8Array(8);
  out[0] = 0x01;
  for (let i = 7, v = n; i > 0; i--, v = Math.floor(v / 256)) out[i] = v & 0xff;
  return out;
}

function element(id, ...children) {
  const body = concat(children);
  return concat([Uint8Array.from(id), size(body.length), body]);
}

function uint(id, value) {
  const bytes = [];
  for (let v = value; bytes.length === 0 || v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return element(id, Uint8Array.from(bytes));
}

function text(id, value) { return element(id, new TextEncoder().encode(value)); }

function float64(id, value) {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setFloat64(0, value);
  return element(id, bytes);
}

/** RFC 7845's identification header: stereo, 48 kHz, no pre-skip (a live stream trims nothing). */
function opusHead() {
  const head = new Uint8Array(19);
  head.set(new TextEncoder().encode("OpusHead"));
  const view = new DataView(head.buffer);
  view.setUint8(8, 1);
  view.setUint8(9, 2);
  view.setUint16(10, 0, true);
  view.setUint32(12, 48000, true);
  return head;
}

/** The initialisation segment: what MSE needs before the first Cluster. */
export function initSegment() {
  const header = element(ID.EBML,
    uint(ID.EBMLVersion, 1), uint(ID.EBMLReadVersion, 1), uint(ID.EBMLMaxIDLength, 4),
    uint(ID.EBMLMaxSizeLength, 8), text(ID.DocType, "webm"), uint(ID.DocTypeVersion, 4),
    uint(ID.DocTypeReadVersion, 2));
  // A live Segment: its size is "unknown" (all ones), Clusters follow for as long as it plays.
  const segment = Uint8Array.from([...ID.Segment, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
  const info = element(ID.Info, uint(ID.TimecodeScale, 1000000), text(ID.MuxingApp, "tonearm"),
    text(ID.WritingApp, "tonearm"));
  const tracks = element(ID.Tracks, element(ID.TrackEntry,
    uint(ID.TrackNumber, 1), uint(ID.TrackUID, 1), uint(ID.TrackType, 2), text(ID.CodecID, "A_OPUS"),
    element(ID.CodecPrivate, opusHead()), uint(ID.CodecDelay, 0), uint(ID.SeekPreRoll, 80000000),
    element(ID.Audio, float64(ID.SamplingFrequency, 48000), uint(ID.Channels, 2))));
  return concat([header, segment, info, tracks]);
}

/** One Cluster holding `packets` (20 ms Opus packets each), the first starting at `startMs`. */
export function cluster(packets, startMs) {
  const blocks = packets.map((packet, i) => {
    const relative = i * 20;
    // Track 1, a signed 16-bit time relative to the Cluster, flags: keyframe (Opus has no others).
    const head = Uint8Array.from([0x81, (relative >> 8) & 0xff, relative & 0xff, 0x80]);
    return element(ID.SimpleBlock, head, packet);
  });
  return element(ID.Cluster, uint(ID.Timecode, startMs), ...blocks);
}
