// What every play's renderer reads from the engine as it goes: the Opus complexity in force
// (the load governor lowers it under load and raises it again) and the loudness of tracks
// measured on earlier plays.
import Synchronization

/// Shared by every play of one engine.
final class RenderContext: Sendable {
    /// The complexity transcoding sessions encode at from their next frame.
    private let currentComplexity: Atomic<Int32>
    let loudness: LoudnessMemory

    init(complexity: Int32, loudness: LoudnessMemory = LoudnessMemory()) {
        currentComplexity = Atomic(complexity)
        self.loudness = loudness
    }

    var complexity: Int32 {
        get { currentComplexity.load(ordering: .relaxed) }
        set { currentComplexity.store(newValue, ordering: .relaxed) }
    }
}
