// The Router's disk refusing writes — full, then read-only — while sessions play: commands are
// applied and answered as usual, what waits to be stored is stored by itself once the disk takes
// it again, and nothing stored before is lost. The data folder is a small tmpfs of the test's own;
// the Router runs without root's permission to override file modes, so a read-only mode holds for
// it as it would for any service account.
import Foundation
import NIOHTTP1
import Testing
import TestSupport

@Suite(.serialized) struct StorageFaultEndToEndTests {
    /// The volume `session` has in the Router's SQLite file, read on the side (read-only).
    static func storedVolume(_ database: String, _ session: String) throws -> Int? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", "-c",
            "import json, sqlite3, sys\n"
                + "row = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)"
                + ".execute('SELECT snapshot FROM session WHERE id = ?', (sys.argv[2],)).fetchone()\n"
                + "print(json.loads(row[0])['volume'] if row else '')",
            database, session,
        ]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return Int(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The Router's `storage` health.
    static func storage(_ cluster: TonearmCluster) async throws -> [String: Any] {
        (try await cluster.getJSON(cluster.routerURL + "/health"))?["storage"] as? [String: Any] ?? [:]
    }

    @Test func aFullOrReadOnlyDiskLosesNothingAndTheRouterRecoversByItself() async throws {
        guard getuid() == 0 else { throw FixtureError("mounting a tmpfs needs root; run the tests as root") }
        let cluster = try TonearmCluster(tones: [440], seconds: 90)
        let data = cluster.directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        try runTool("mount", ["-t", "tmpfs", "-o", "size=2m,mode=0700", "tonearm-test", data])
        defer { _ = try? runTool("umount", ["-l", data]) }
        // Root, but held to file modes like any other account.
        cluster.routerLauncher = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let pid = try #require(cluster.engine?.pid)
        let database = data + "/tonearm.sqlite"
        let bystander = SessionListener(session: "bystander", routerPort: cluster.routerPort, bot: true)
        defer { bystander.close() }
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("bystander", "tone-440.mp3").status == 202)
        #expect(await bystander.hears(440))
        #expect(try await cluster.call(.POST, "/api/sessions/kept/volume", #"{"volume":20}"#).status == 200)
        #expect(try await cluster.call(.POST, "/api/sessions/idle/volume", #"{"volume":37}"#).status == 200)
        #expect(try await eventually { try Self.storedVolume(database, "idle") == 37 && Self.storedVolume(database, "kept") == 20 })

        // Full: the command is applied and answered, the change waits.
        let filler = Process()
        filler.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        filler.arguments = ["dd", "if=/dev/zero", "of=\(data)/filler", "bs=64k"]
        filler.standardError = FileHandle.nullDevice
        try filler.run()
        filler.waitUntilExit()
        let full = await SlowSourceEndToEndTests.timed(cluster, "/api/sessions/idle/volume", #"{"volume":55}"#)
        #expect(full.status == 200 && full.took < .seconds(1) && full.json["volume"] as? Int == 55, "\(full.status) \(full.body)")
        #expect(try await eventually(timeout: .seconds(5)) { try await Self.storage(cluster)["ok"] as? Bool == false })
        let waiting = try await Self.storage(cluster)
        // The idle session's change waits (and the bystander's position, once it has moved).
        #expect((waiting["unsaved_sessions"] as? Int ?? 0) >= 1 && (waiting["last_error"] as? String)?.contains("full") == true, "\(waiting)")
        #expect(try Self.storedVolume(database, "idle") == 37, "what was stored before stays")
        try FileManager.default.removeItem(atPath: data + "/filler")
        #expect(try await eventually(timeout: .seconds(8)) { try Self.storedVolume(database, "idle") == 55 }, "not stored when space came back")
        #expect(try await Self.storage(cluster)["ok"] as? Bool == true)

        // Read-only: the same, and stored once it may write again.
        chmod(data, 0o555)
        chmod(database, 0o444)
        let readOnly = await SlowSourceEndToEndTests.timed(cluster, "/api/sessions/idle/volume", #"{"volume":66}"#)
        #expect(readOnly.status == 200 && readOnly.took < .seconds(1), "\(readOnly.status) \(readOnly.body)")
        #expect(try await eventually(timeout: .seconds(5)) { try await Self.storage(cluster)["ok"] as? Bool == false })
        #expect(try Self.storedVolume(database, "idle") == 55)
        chmod(data, 0o700)
        chmod(database, 0o644)
        #expect(try await eventually(timeout: .seconds(8)) { try Self.storedVolume(database, "idle") == 66 }, "not stored when writable again")
        #expect(try await Self.storage(cluster)["ok"] as? Bool == true)
        #expect(try Self.storedVolume(database, "kept") == 20, "another session's stored state was lost")

        // The bystander played on through it all, from the same engine over the same link.
        #expect(try await cluster.state("idle")["volume"] as? Int == 66)
        try await SlowSourceEndToEndTests.expectBystanderUntouched(cluster, bystander, pid: pid)
    }
}
