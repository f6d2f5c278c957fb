// A token bucket per key (a client address): `burst` at once, then `perMinute` a minute. Used for
// minting identities, so one client cannot make itself as many listeners as it likes.
import Synchronization

/// Token buckets per key, in a bounded table.
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    let perMinute: Int
    let burst: Int
    /// Keys remembered at most; beyond that, buckets that have refilled are forgotten first.
    let maxKeys: Int
    private let buckets = Mutex<[String: Bucket]>([:])

    init(perMinute: Int, burst: Int, maxKeys: Int = 10_000) {
        self.perMinute = perMinute
        self.burst = max(burst, 1)
        self.maxKeys = maxKeys
    }

    /// Keys remembered now.
    var trackedKeys: Int { buckets.withLock { $0.count } }

    /// Takes one token for `key`: nil when admitted, else how long until one is there.
    func admit(_ key: String, now: ContinuousClock.Instant = .now) -> Duration? {
        let rate = Double(perMinute) / 60  // tokens a second
        return buckets.withLock { buckets -> Duration? in
            var bucket = buckets[key] ?? Bucket(tokens: Double(burst), updated: now)
            let elapsed = now - bucket.updated
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(Double(burst), bucket.tokens + max(seconds, 0) * rate)
            bucket.updated = now
            guard bucket.tokens >= 1 else {
                buckets[key] = bucket
                return rate > 0 ? .seconds((1 - bucket.tokens) / rate) : .seconds(3_600)
            }
            bucket.tokens -= 1
            if buckets[key] == nil && buckets.count >= maxKeys {
                Self.forget(&buckets, keeping: maxKeys / 2, now: now, rate: rate, burst: burst)
            }
            buckets[key] = bucket
            return nil
        }
    }

    /// Drops the buckets that would be full by now (they hold nothing a new bucket would not);
    /// then, if more than `keeping` are still draining, the least recently used beyond that.
    private static func forget(
        _ buckets: inout [String: Bucket], keeping: Int, now: ContinuousClock.Instant, rate: Double, burst: Int
    ) {
        buckets = buckets.filter { _, bucket in
            bucket.tokens + Double((now - bucket.updated).components.seconds) * rate < Double(burst)
        }
        guard buckets.count > keeping else { return }
        let oldest = buckets.sorted { $0.value.updated < $1.value.updated }.prefix(buckets.count - keeping).map(\.key)
        for key in oldest { buckets.removeValue(forKey: key) }
    }
}
