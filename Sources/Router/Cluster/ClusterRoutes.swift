// A pair leaving the cluster on purpose: `POST /api/cluster/drain`, and the same at SIGTERM.
import Hummingbird
import ServiceLifecycle
import ServiceSupport

/// `POST /api/cluster/drain` (the bot token): hands every session of this pair to the others and
/// takes no new ones, for an upgrade without waiting for SIGTERM. A pair not in a cluster answers
/// 409 `not_clustered`.
struct ClusterRoutes {
    let member: ClusterMember?
    let access: AccessControl

    struct Drained: ResponseEncodable {
        var pair: String
        var handedOver: Int
        enum CodingKeys: String, CodingKey {
            case pair
            case handedOver = "handed_over"
        }
    }

    func addRoutes(to router: Router<TonearmRequestContext>) {
        router.post("/api/cluster/drain") { request, _ -> Drained in
            try access.requireBot(request)
            guard let member else {
                throw APIError(
                    status: .conflict, code: "not_clustered", message: "this Router is not in a cluster (no TONEARM_DATABASE_URL)")
            }
            return Drained(pair: member.settings.pairID, handedOver: await member.handOver())
        }
    }
}

/// Hands the pair's sessions over when the Router is told to stop, before anything else stops
/// (it is the second-last service, told right after the shutdown deadline starts its clock),
/// then moves the clients it relays to other pairs.
struct ClusterHandOver: Service {
    let member: ClusterMember
    let relay: ClusterRelay

    func run() async {
        try? await gracefulShutdown()
        await member.handOver()
        await relay.moveAll(patience: ClusterRelay.leaveGrace + .milliseconds(200))
    }
}
