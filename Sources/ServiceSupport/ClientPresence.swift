// Work done for one HTTP request, called off when the requesting connection goes away: a
// resolve the Router gave up on, a lookup whose browser left. Hummingbird does not cancel a
// handler whose client leaves, and NIO does not even notice: its HTTP server stops reading while
// a request is answered, so the client's FIN waits unread. A child task asks the kernel instead
// (the TCP state: anything but established means the client closed or reset).
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// How often a long request looks whether its client is still there.
package let clientPresenceCheck: Duration = .milliseconds(100)

/// Runs `work`, cancelled as soon as `channel` (the request's connection) has closed; throws
/// `APIError.cancelled` then.
package func untilClientLeaves<T: Sendable>(
    _ channel: any Channel, _ work: @escaping @Sendable () async throws(APIError) -> T
) async throws(APIError) -> T {
    let outcome = await withTaskGroup(of: Race<Result<T, APIError>>.self) { group in
        group.addTask {
            do throws(APIError) {
                return .done(.success(try await work()))
            } catch {
                return .done(.failure(error))
            }
        }
        group.addTask {
            while await isConnected(channel), (try? await Task.sleep(for: clientPresenceCheck)) != nil {}
            return .interrupted
        }
        defer { group.cancelAll() }
        return await group.next() ?? .interrupted
    }
    guard case .done(let result) = outcome else { throw .cancelled }
    return try result.get()
}

/// Whether the client at the other end of `channel` is still connected, as far as the kernel
/// knows (a TCP connection whose peer sent FIN is in CLOSE_WAIT even before anyone reads it).
package func isConnected(_ channel: any Channel) async -> Bool {
    guard channel.isActive else { return false }
    #if os(Linux)
    guard let socket = channel as? any SocketOptionProvider, let info = try? await socket.getTCPInfo().get() else {
        return true
    }
    return info.tcpi_state == UInt8(TCP_ESTABLISHED)
    #else
    return true
    #endif
}
