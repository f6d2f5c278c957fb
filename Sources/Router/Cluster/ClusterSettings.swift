// The cluster settings of a pair (TONEARM_DATABASE_URL and its companions, docs/cluster.md).

struct ClusterSettings: Sendable {
    var databaseURL: String
    /// This pair's name, unique in the cluster.
    var pairID: String
    /// Where the other pairs' Routers reach this one (http://host:port).
    var address: String
    /// The most sessions placement gives this pair.
    var maxSessions: Int = 60
    /// How long a lease runs unrenewed before another pair may take its session.
    var lease: Duration = .seconds(3)

    var renewEvery: Duration { lease / 8 }
    /// A pair stops playing its sessions this long before their leases could end.
    var fenceMargin: Duration { lease / 3 }
    /// A pair not heard from for this long is not offered sessions.
    var pairTimeout: Duration { lease }
    /// A pair whose heartbeats came no further apart than this for a whole lease is steady:
    /// placement and hand-overs prefer it (one back from a cut may fail its rounds again).
    var steadyGap: Duration { lease / 2 }
    /// The longest a round (its one statement) may take before its connection is given up.
    var roundLimit: Duration { renewEvery * 2 }
}
