// What network sources are fetched with: the policy every connection is checked against, the
// event loops the HTTP connections run on, TLS, and the timeouts. One per engine.
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// The engine's HTTP(S) client settings for sources, shared by every fetch.
package final class SourceNetwork: Sendable {
    let policy: NetworkPolicy
    let group: any EventLoopGroup
    /// Client TLS with the system's authorities (plus `extraAuthorities`, a private CA's PEM).
    let tls: NIOSSLContext
    /// A connection attempt (TCP, then TLS) that takes longer fails.
    let connectTimeout: TimeAmount
    /// A connection that delivers nothing for this long while bytes are wanted is dropped and
    /// reopened where it stopped.
    let stallTimeout: TimeAmount
    /// A source that has not opened (connected, answered, shown its format) within this long is
    /// given up with `source_timeout` (TONEARM_RESOLVE_TIMEOUT), however slowly bytes still come.
    let openTimeout: TimeAmount
    /// Redirects followed for one request.
    static let maxRedirects = 5

    package init(
        policy: NetworkPolicy, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        extraAuthorities: String? = nil, connectTimeout: TimeAmount = .seconds(10), stallTimeout: TimeAmount = .seconds(10),
        openTimeout: TimeAmount = .seconds(15)
    ) throws {
        self.policy = policy
        self.group = group
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let extraAuthorities { configuration.additionalTrustRoots = [.file(extraAuthorities)] }
        tls = try NIOSSLContext(configuration: configuration)
        self.connectTimeout = connectTimeout
        self.stallTimeout = stallTimeout
        self.openTimeout = openTimeout
    }

    /// Looks `host` up under the policy on a thread of its own (DNS blocks, and a slow name
    /// server must hold up nobody else) and hands the permitted addresses to `loop`.
    func addresses(of host: String, port: Int, on loop: any EventLoop) -> EventLoopFuture<[SocketAddress]> {
        let promise = loop.makePromise(of: [SocketAddress].self)
        let policy = policy
        Thread.detachNewThread {
            do {
                promise.succeed(try policy.addresses(of: host, port: port))
            } catch {
                promise.fail(error)
            }
        }
        return promise.futureResult
    }
}
