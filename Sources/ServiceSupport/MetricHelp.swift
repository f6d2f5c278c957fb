// Help texts for the Prometheus exposition. swift-metrics, which both servers record through, has
// no place for them, and Prometheus tooling (`promtool check metrics`) wants one per family.
import Foundation

/// Each metric family's help text, by family name.
public struct MetricHelp: Sendable {
    public let texts: [String: String]

    public init(_ texts: [String: String]) { self.texts = texts }

    /// `exposition` with a `# HELP name text` line before each `# TYPE name …` line that has a text
    /// (and none already).
    public func annotate(_ exposition: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(exposition.count + texts.count * 64)
        var previousWasHelp = false
        for line in exposition.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            let text = String(decoding: line, as: UTF8.self)
            if text.hasPrefix("# TYPE "), !previousWasHelp {
                let name = text.dropFirst(7).split(separator: " ").first.map(String.init) ?? ""
                if let help = texts[name] { output += Array("# HELP \(name) \(Self.escaped(help))\n".utf8) }
            }
            previousWasHelp = text.hasPrefix("# HELP ")
            output += line
            output.append(UInt8(ascii: "\n"))
        }
        if exposition.last == UInt8(ascii: "\n") || exposition.isEmpty { output.removeLast() }
        return output
    }

    /// Help text as the exposition format wants it: backslashes and line breaks escaped.
    private static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }
}
