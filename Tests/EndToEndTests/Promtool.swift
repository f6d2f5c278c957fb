// Prometheus's own linter on a `/metrics` answer: `promtool check metrics` (Debian's `prometheus`
// package) reads the exposition on stdin and names every problem (a family without help text,
// a counter without `_total`, a malformed line); it exits non-zero when it finds one.
import Foundation

enum Promtool {
    /// What promtool says about `exposition`, and whether it found nothing wrong.
    static func check(_ exposition: String) throws -> (ok: Bool, report: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["promtool", "check", "metrics"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = output
        try process.run()
        input.fileHandleForWriting.write(Data(exposition.utf8))
        try input.fileHandleForWriting.close()
        let report = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus == 0, report)
    }
}
