// tonearm-listeners: M WebSocket listeners on the Router's `/bot` endpoint, reading at full speed
// on one epoll thread, and (optionally) a tap on the engine's Unix socket, so that each frame's
// engine → client latency is the time between the engine writing it and a listener reading it.
// Written against raw sockets so the listeners cost as little CPU as possible beside the Router
// they measure. Prints one JSON object. Used by `Benchmarks/Load/tonearm-load`.
import CEpoll
import Foundation
import Glibc
#if canImport(CDispatch)
    import CDispatch  // `timespec` as Foundation re-exports it, with MemberImportVisibility
#endif
import Synchronization

struct Options {
    var port = 8080
    var guilds: [String] = []
    var perGuild = 1
    var token = ""
    var seconds = 10.0
    var tap: String?
    var warmup = 3.0
    /// Audio frames per message asked of the Router (`frames=`; 1: one per message, no lengths).
    var frames = 1
    /// The session every guild follows (`--station`): its id is in the tap's key for all of them.
    var station: String?

    init(_ arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let flag = iterator.next() {
            guard let value = iterator.next() else { fatalError("\(flag) needs a value") }
            switch flag {
            case "--port": port = Int(value)!
            case "--guilds": guilds = value.split(separator: ",").map(String.init)
            case "--per-guild": perGuild = Int(value)!
            case "--token": token = value
            case "--seconds": seconds = Double(value)!
            case "--tap": tap = value
            case "--warmup": warmup = Double(value)!
            case "--frames": frames = Int(value)!
            case "--station": station = value
            default: fatalError("unknown option \(flag)")
            }
        }
    }
}

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// FNV-1a over the session id and the Opus payload: the key that matches a frame at the tap
/// with the same frame at a listener.
func frameKey(_ session: some Sequence<UInt8>, _ payload: UnsafeRawBufferPointer) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in session { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
    for byte in payload { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
    return hash
}

/// Latencies in 10 µs buckets up to 2 s.
struct Histogram {
    var buckets = [UInt64](repeating: 0, count: 200_001)
    var count: UInt64 = 0
    var maximum: UInt64 = 0

    mutating func record(_ nanos: UInt64) {
        buckets[Int(min(nanos / 10_000, 200_000))] += 1
        count += 1
        maximum = max(maximum, nanos)
    }

    func percentile(_ p: Double) -> Double {
        guard count > 0 else { return .nan }
        let target = UInt64((Double(count) * p).rounded(.up))
        var seen: UInt64 = 0
        for (index, n) in buckets.enumerated() {
            seen += n
            if seen >= target { return Double(index) * 0.01 }
        }
        return Double(maximum) / 1e6
    }
}

/// Reads the engine socket on its own thread and remembers when each frame arrived.
final class Tap: Sendable {
    let arrivals = Mutex<[UInt64: UInt64]>([:])
    let frames = Atomic<Int>(0)

    init(path: String) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            _ = path.utf8CString.withUnsafeBytes { raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(raw.count))) }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { fatalError("cannot connect to the engine socket \(path): errno \(errno)") }
        let thread = Thread { [self] in read(fd) }
        thread.start()
    }

    private func read(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var filled = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + filled, $0.count - filled, 0) }
            guard n > 0 else { return }
            let now = monotonicNanos()
            filled += n
            var offset = 0
            var keys: [UInt64] = []
            buffer.withUnsafeBytes { bytes in
                while filled - offset >= 1 {
                    if bytes[offset] == UInt8(ascii: "{") {
                        guard let newline = bytes[offset..<filled].firstIndex(of: 10) else { break }
                        offset = newline + 1
                        continue
                    }
                    guard filled - offset >= 4 else { break }
                    let length = Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
                    guard filled - offset >= 4 + length else { break }
                    let idBytes = bytes[(offset + 4)..<(offset + 28)]
                    let id = idBytes.prefix { $0 != 0x20 }
                    let payload = UnsafeRawBufferPointer(rebasing: bytes[(offset + 28)..<(offset + 4 + length)])
                    keys.append(frameKey(id, payload))
                    offset += 4 + length
                }
            }
            if offset > 0 {
                buffer.withUnsafeMutableBytes { raw in
                    raw.baseAddress!.copyMemory(from: raw.baseAddress! + offset, byteCount: filled - offset)
                }
                filled -= offset
            }
            arrivals.withLock { map in
                for key in keys where map[key] == nil { map[key] = now }
            }
            frames.add(keys.count, ordering: .relaxed)
        }
    }
}

/// One WebSocket listener.
struct Listener {
    let fd: Int32
    let guild: [UInt8]
    var buffer: [UInt8] = []
    var frames = 0
    var lastFrame: UInt64 = 0
    var longestGap: UInt64 = 0
    var closed = false
}

func connectWebSocket(port: Int, guild: String, token: String, frames: Int) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { fatalError("cannot connect to the Router on port \(port): errno \(errno)") }
    let request =
        "GET /bot?guild=\(guild)\(frames > 1 ? "&frames=\(frames)" : "") HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Key: dG9uZWFybS1saXN0ZW5lcg==\r\nSec-WebSocket-Version: 13\r\n"
        + "Authorization: Bearer \(token)\r\n\r\n"
    _ = request.utf8CString.withUnsafeBytes { send(fd, $0.baseAddress!, $0.count - 1, 0) }
    // Read the response head byte by byte so no WebSocket bytes are consumed with it.
    var head: [UInt8] = []
    var byte: UInt8 = 0
    while !(head.count >= 4 && head.suffix(4) == [13, 10, 13, 10]) {
        guard recv(fd, &byte, 1, 0) == 1 else { fatalError("the Router closed the upgrade of guild \(guild)") }
        head.append(byte)
    }
    let status = String(decoding: head, as: UTF8.self)
    guard status.hasPrefix("HTTP/1.1 101") else { fatalError("upgrade of guild \(guild) refused: \(status)") }
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    return fd
}

/// A masked client frame (pong) with `payload`.
func pong(_ payload: ArraySlice<UInt8>, to fd: Int32) {
    var frame: [UInt8] = [0x8A, 0x80 | UInt8(payload.count), 0, 0, 0, 0]
    frame.append(contentsOf: payload)
    _ = send(fd, frame, frame.count, Int32(MSG_NOSIGNAL))
}

let options = Options(CommandLine.arguments)
let tap = options.tap.map { Tap(path: $0) }
let station = options.station.map { Array($0.utf8) }
var listeners: [Listener] = []
for guild in options.guilds {
    for _ in 0..<options.perGuild {
        let fd = connectWebSocket(port: options.port, guild: guild, token: options.token, frames: options.frames)
        listeners.append(Listener(fd: fd, guild: Array(guild.utf8)))
    }
}
let epoll = epoll_create1(0)
for (index, listener) in listeners.enumerated() {
    var event = epoll_event()
    event.events = EPOLLIN.rawValue
    event.data.u64 = UInt64(index)
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener.fd, &event)
}

var histogram = Histogram()
/// With `--station`, every listener follows the one station: how far apart the first and the last
/// of them read each frame (each frame's first and last arrival, and how many have read it).
var arrivalsOf: [UInt64: (first: UInt64, last: UInt64, count: Int)] = [:]
var spread = Histogram()
var spreadIncomplete = 0
var unmatched = 0
var textMessages = 0
var audioMessages = 0
var chunk = [UInt8](repeating: 0, count: 1 << 16)
var events = [epoll_event](repeating: epoll_event(), count: 1_024)
let start = monotonicNanos()
let deadline = start + UInt64(options.seconds * 1e9)
var tapBehind = 0
var nextPrune = start + 1_000_000_000
/// Frames and latencies count from here: connecting thousands of listeners takes a while, and
/// what the Router buffered meanwhile arrives in a burst.
let measureFrom = start + UInt64(options.warmup * 1e9)
while monotonicNanos() < deadline {
    let ready = epoll_wait(epoll, &events, Int32(events.count), 100)
    guard ready > 0 else { continue }
    let now = monotonicNanos()
    var pendingKeys: [(UInt64, UInt64)] = []
    for event in events.prefix(Int(ready)) {
        let index = Int(event.data.u64)
        let n = chunk.withUnsafeMutableBytes { recv(listeners[index].fd, $0.baseAddress!, $0.count, 0) }
        if n == 0 || (n < 0 && errno != EAGAIN) {
            listeners[index].closed = true
            epoll_ctl(epoll, EPOLL_CTL_DEL, listeners[index].fd, nil)
            continue
        }
        guard n > 0 else { continue }
        listeners[index].buffer.append(contentsOf: chunk[0..<n])
        var offset = 0
        let buffer = listeners[index].buffer
        while buffer.count - offset >= 2 {
            let opcode = buffer[offset] & 0x0F
            var length = Int(buffer[offset + 1] & 0x7F)
            var header = 2
            if length == 126 {
                guard buffer.count - offset >= 4 else { break }
                length = Int(buffer[offset + 2]) << 8 | Int(buffer[offset + 3])
                header = 4
            } else if length == 127 {
                guard buffer.count - offset >= 10 else { break }
                length = (0..<8).reduce(0) { $0 << 8 | Int(buffer[offset + 2 + $1]) }
                header = 10
            }
            guard buffer.count - offset >= header + length else { break }
            let body = (offset + header)..<(offset + header + length)
            switch opcode {
            case 0x2 where now < measureFrom:
                break
            case 0x2:
                audioMessages += 1
                if listeners[index].lastFrame > 0 {
                    listeners[index].longestGap = max(listeners[index].longestGap, now - listeners[index].lastFrame)
                }
                listeners[index].lastFrame = now
                // One packet per message, or several, each after its u16 length (`--frames`).
                var packets: [Range<Int>] = []
                if options.frames == 1 {
                    packets = [body]
                } else {
                    var at = body.lowerBound
                    while at + 2 <= body.upperBound {
                        let size = Int(buffer[at]) << 8 | Int(buffer[at + 1])
                        guard at + 2 + size <= body.upperBound else { break }
                        packets.append((at + 2)..<(at + 2 + size))
                        at += 2 + size
                    }
                }
                listeners[index].frames += packets.count
                if tap != nil || station != nil {
                    for packet in packets {
                        let session = station ?? listeners[index].guild
                        let key = buffer.withUnsafeBytes { frameKey(session, UnsafeRawBufferPointer(rebasing: $0[packet])) }
                        if tap != nil { pendingKeys.append((key, now)) }
                        if station != nil {
                            var seen = arrivalsOf[key] ?? (now, now, 0)
                            seen.last = now
                            seen.count += 1
                            if seen.count == listeners.count {
                                spread.record(seen.last - seen.first)
                                arrivalsOf[key] = nil
                            } else {
                                arrivalsOf[key] = seen
                            }
                        }
                    }
                }
            case 0x1: textMessages += 1
            case 0x9: pong(buffer[body], to: listeners[index].fd)
            case 0x8: listeners[index].closed = true
            default: break
            }
            offset += header + length
        }
        listeners[index].buffer.removeFirst(offset)
    }
    if let tap, !pendingKeys.isEmpty, now >= measureFrom {
        tap.arrivals.withLock { map in
            for (key, at) in pendingKeys {
                // Every listener of a session matches the same entry. The tap may read a frame a
                // little after the Router has forwarded it (both wait for the CPU): counted as 0.
                guard let sent = map[key] else { unmatched += 1; continue }
                if at < sent { tapBehind += 1 }
                histogram.record(at > sent ? at - sent : 0)
            }
        }
    }
    if now >= nextPrune {
        // Frames older than 5 s can no longer arrive; keep the tables small. A station's frame
        // not read by every follower by then (one was closed, or joined late) is counted apart.
        tap?.arrivals.withLock { map in map = map.filter { now &- $0.value < 5_000_000_000 } }
        let before = arrivalsOf.count
        arrivalsOf = arrivalsOf.filter { now &- $0.value.first < 5_000_000_000 }
        spreadIncomplete += before - arrivalsOf.count
        nextPrune = now + 1_000_000_000
    }
}
let elapsed = Double(monotonicNanos() - measureFrom) / 1e9
let frames = listeners.reduce(0) { $0 + $1.frames }
let healthy = listeners.filter { !$0.closed }
var report: [String: Any] = [
    "listeners": listeners.count,
    "closed": listeners.count - healthy.count,
    "seconds": elapsed,
    "frames": frames,
    "frames_per_second": Double(frames) / elapsed,
    "fewest_frames_per_listener": listeners.map(\.frames).min() ?? 0,
    "longest_gap_ms": Double(listeners.map(\.longestGap).max() ?? 0) / 1e6,
    "text_messages": textMessages,
    "audio_messages": audioMessages,
    "tap_frames": tap?.frames.load(ordering: .relaxed) ?? 0,
    "latency_samples": histogram.count,
    "latency_unmatched": unmatched,
    "latency_tap_behind": tapBehind,
    "latency_p50_ms": histogram.percentile(0.5),
    "latency_p99_ms": histogram.percentile(0.99),
    "latency_max_ms": Double(histogram.maximum) / 1e6,
]
if station != nil {
    report["spread_samples"] = spread.count
    report["spread_incomplete"] = spreadIncomplete
    report["spread_p50_ms"] = spread.count > 0 ? spread.percentile(0.5) : -1
    report["spread_p99_ms"] = spread.count > 0 ? spread.percentile(0.99) : -1
    report["spread_max_ms"] = Double(spread.maximum) / 1e6
}
let json = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
print(String(decoding: json, as: UTF8.self))
exit(0)
