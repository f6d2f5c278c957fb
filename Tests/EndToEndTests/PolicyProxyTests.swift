// The proxy yt-dlp goes through, driven by curl the way yt-dlp drives it: absolute-form http
// requests and CONNECT tunnels reach an allowed host (127.0.0.2, a stand-in for a public one),
// and neither reaches 127.0.0.1 (the engine's own loopback), which never sees a request.
import Foundation
import Logging
import NIOPosix
import ServiceSupport
import Testing
import TestSupport

@testable import AudioEngine

@Suite(.serialized) struct PolicyProxyTests {
    /// curl through `proxy` (CONNECT with `tunnel`); the status (the CONNECT's, when that was
    /// refused) and the body.
    func curl(_ url: String, proxy: String, tunnel: Bool = false) throws -> (status: Int, body: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["curl", "-s", "--max-time", "10", "-x", proxy, "-w", "\n%{http_code} %{http_connect}"] + (tunnel ? ["-p"] : []) + [url]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        // The answer's status, or the CONNECT's when the tunnel was refused.
        let codes = (lines.last ?? "").split(separator: " ").compactMap { Int($0) }
        return (codes.first { $0 != 0 } ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    @Test func requestsReachOnlyHostsThePolicyAllows() async throws {
        let served = try TemporaryDirectory(prefix: "tonearm-proxy")
        try "outside\n".write(toFile: served.file("page.html"), atomically: true, encoding: .utf8)
        let outside = try MediaServer(root: served.path, address: "127.0.0.2")
        defer { outside.stop() }
        let inside = try MediaServer(root: served.path, address: "127.0.0.1")
        defer { inside.stop() }
        let network = try SourceNetwork(
            policy: NetworkPolicy(allowPrivateSources: false, allowedNetworks: try IPNetwork.list("127.0.0.2/32", setting: "test")))
        let proxy = try await PolicyProxy.start(network: network, logger: Logger(label: "proxy"))

        // Plain http (absolute form) and a CONNECT tunnel to the allowed host both arrive.
        #expect(try curl(outside.url("page.html"), proxy: proxy.url) == (200, "outside\n"))
        #expect(try curl(outside.url("page.html"), proxy: proxy.url, tunnel: true) == (200, "outside\n"))
        #expect(try await outside.requests().count == 2)

        // Neither way reaches loopback: 403 with the policy's reason, and nothing arrives there.
        let plain = try curl(inside.url("page.html"), proxy: proxy.url)
        #expect(plain.status == 403 && plain.body.contains("127.0.0.1"), "\(plain)")
        let tunnelled = try curl(inside.url("page.html"), proxy: proxy.url, tunnel: true)
        #expect(tunnelled.status == 403, "\(tunnelled)")
        #expect(try await inside.requests().isEmpty, "a request reached 127.0.0.1")

        // Without the engine's credential the proxy serves nobody.
        let stranger = try curl(outside.url("page.html"), proxy: "http://127.0.0.1:\(proxy.port)")
        #expect(stranger.status == 407, "\(stranger)")
        #expect(try await outside.requests().count == 2)
        await proxy.close()
    }
}
