// What the Router queues from a resolved URL.
import EngineAPI

extension Resolution {
    /// The tracks to queue: every entry of a playlist, or the URL itself.
    var tracks: [Track] {
        if isPlaylist, !entries.isEmpty {
            return entries.map { Track(url: $0.url, title: $0.title, durationMS: $0.durationMS, thumbnail: $0.thumbnail) }
        }
        return [Track(url: url, title: title, durationMS: durationMS, thumbnail: thumbnail)]
    }
}
