// What every engine request carries: Hummingbird's context and the connection's channel, so work
// done for a request (a resolve, a search) is called off when the Router that asked goes away
// (`untilClientLeaves`).
import Hummingbird
import NIOCore

/// The request context of the engine's control API.
struct EngineRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
