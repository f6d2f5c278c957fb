// Turns the `url` of a play request into something libavformat may open. For now: a file inside
// the configured media directory, named by a relative path, an absolute path inside it, or a
// `file:` URL is refused. Nothing outside the directory is ever opened (symlinks included).
import Foundation
import ServiceSupport


/// The media directory, and the rule for what may be played from it.
package struct MediaLibrary: Sendable {
    /// The directory with symlinks resolved, without a trailing slash.
    let root: String

    package init(directory: String) {
        let url = URL(fileURLWithPath: directory).standardizedFileURL.resolvingSymlinksInPath()
        self.root = url.path
    }

    func resolve(_ url: String) throws(APIError) -> ResolvedSource {
        let trimmed = url.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else {
            throw .badRequest("missing_url", "\"url\" is empty: give a file name inside the media directory")
        }
        if let scheme = SourceResolver.scheme(of: trimmed) {
            throw .unprocessable(
                "unsupported_scheme",
                "the \(scheme): scheme is not accepted; give a file name inside the media directory")
        }
        let candidate =
            trimmed.hasPrefix("/") ? URL(fileURLWithPath: trimmed) : URL(fileURLWithPath: root).appendingPathComponent(trimmed)
        let resolved = candidate.standardizedFileURL.resolvingSymlinksInPath().path
        guard resolved.hasPrefix(root + "/") else {
            throw .unprocessable(
                "outside_media_dir", "\"\(trimmed)\" is outside the media directory; only files inside it can be played")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw .unprocessable("source_not_found", "no file \"\(trimmed)\" in the media directory")
        }
        return ResolvedSource(location: resolved, displayName: (resolved as NSString).lastPathComponent)
    }
}
