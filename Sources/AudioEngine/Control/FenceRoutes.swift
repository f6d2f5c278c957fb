// `/fence`: what a cluster pair's Router lets this engine play (EngineAPI `Fence`).
import EngineAPI
import Hummingbird
import ServiceSupport

extension FenceState: ResponseEncodable {}

extension ControlAPI {
    /// A fence naming `Fence.maxSessions` sessions fits in 4 MB of JSON.
    static let fenceBodyLimit = 4 << 20

    func addFenceRoutes(to router: Router<some RequestContext>) {
        router.put("/fence") { request, context -> FenceState in
            let fence = try await Self.decode(Fence.self, request, context, limit: Self.fenceBodyLimit)
            return try manager.setFence(fence)
        }
        router.get("/fence") { _, _ -> FenceState in
            manager.fenceState
        }
    }
}
