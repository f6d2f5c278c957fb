// The Router serving HTTPS itself (TONEARM_TLS_CERT, TONEARM_TLS_KEY): the API and audio over TLS
// with a certificate from a test authority, plain HTTP refused on that port, and settings that
// cannot work refused at start with a sentence saying why.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport

@Suite(.serialized) struct RouterTLSEndToEndTests {
    @Test func httpsCarriesTheAPIAndTheAudioAndPlainHTTPIsRefused() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 10, tls: true)
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.startBoth()
        #expect(cluster.routerURL.hasPrefix("https://"))
        let identity = try await cluster.post(cluster.routerURL + "/api/identity", token: nil)
        #expect(identity.status == 200 && identity.body.contains("\"token\""), "\(identity)")
        #expect(try await cluster.play("tls", "tone-440.mp3").status == 202)
        // The Ogg stream over HTTPS, decoded by ffmpeg outside the Router.
        var request = HTTPClientRequest(url: cluster.routerURL + "/listen/tls.ogg?token=\(TonearmCluster.botToken)")
        request.method = .GET
        let response = try await cluster.client.execute(request, timeout: .seconds(10))
        #expect(response.status == .ok)
        var ogg = [UInt8]()
        for try await chunk in response.body {
            ogg += chunk.readableBytesView
            if ogg.count > 40_000 { break }
        }
        let file = cluster.directory.file("tls.ogg")
        try Data(ogg).write(to: URL(fileURLWithPath: file))
        let heard = Spectrum.dominantFrequency(Array(try MediaFixture.decodeMono(file).suffix(24_000)))
        #expect(abs(heard - 440) < 5, "the Ogg stream over HTTPS decodes to \(heard) Hz")
        // A bot's WebSocket over wss://, recorded by a client that trusts only the test authority.
        let certificates = try #require(cluster.certificates)
        let recorded = cluster.directory.file("wss.ogg")
        let probe = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/ws_probe.py").path
        try runTool("env", [
            "SSL_CERT_FILE=\(certificates.authority)", "python3", probe,
            "wss://localhost:\(cluster.routerPort)/bot?guild=tls&token=\(TonearmCluster.botToken)", "record", "3", recorded,
        ])
        let overWebSocket = Spectrum.dominantFrequency(Array(try MediaFixture.decodeMono(recorded).suffix(24_000)))
        #expect(abs(overWebSocket - 440) < 5, "the bot WebSocket over wss:// decodes to \(overWebSocket) Hz")
        // The same port does not speak plain HTTP.
        await #expect(throws: (any Error).self) {
            _ = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: "http://127.0.0.1:\(cluster.routerPort)/health"), timeout: .seconds(5))
        }
    }

    @Test(arguments: [
        (["TONEARM_TLS_CERT": "/nonexistent/cert.pem"], "TONEARM_TLS_CERT and TONEARM_TLS_KEY go together"),
        (["TONEARM_TLS_CERT": "/nonexistent/cert.pem", "TONEARM_TLS_KEY": "/nonexistent/key.pem"],
         "is not a readable PEM certificate chain"),
    ])
    func settingsThatCannotServeHTTPSStopTheRouterWithASentence(environment: [String: String], says: String)
        async throws
    {
        let cluster = try TonearmCluster(tones: [], environment: environment)
        try cluster.startRouter()
        let router = try #require(cluster.router)
        #expect(await router.waitForExit(timeout: .seconds(10)), "the Router kept running")
        #expect(router.exitCode != 0)
        #expect(router.log.contains(says), "log: \(router.log)")
    }

    @Test func aKeyThatIsNotAKeyIsRefused() async throws {
        let cluster = try TonearmCluster(tones: [], tls: true)
        let certificates = try #require(cluster.certificates)
        // The certificate where the key should be.
        let router = try BinaryProcess(
            "Router", environment: cluster.environment.merging(["TONEARM_TLS_KEY": certificates.certificate]) { _, new in new },
            logDirectory: cluster.directory.path)
        #expect(await router.waitForExit(timeout: .seconds(10)))
        #expect(router.log.contains("is not a readable PEM private key"), "log: \(router.log)")
        await cluster.stop()
    }
}
