// What every play's renderer reads from the engine as it goes: the Opus complexity in force
// (the load governor lowers it under load and raises it again), the frames encoded ahead (the
// governor deepens the lead where frames came late) and the loudness of tracks measured on
// earlier plays.
import Synchronization

/// Shared by every play of one engine.
final class RenderContext: Sendable {
    /// The complexity transcoding sessions encode at from their next frame.
    private let currentComplexity: Atomic<Int32>
    /// The frames transcoding sessions encode ahead of the clock from their next refill.
    private let currentLead: Atomic<Int>
    let loudness: LoudnessMemory

    init(complexity: Int32, lead: Int = PlaybackConfiguration().leadFrames, loudness: LoudnessMemory = LoudnessMemory()) {
        currentComplexity = Atomic(complexity)
        currentLead = Atomic(max(lead, 1))
        self.loudness = loudness
    }

    var lead: Int {
        get { currentLead.load(ordering: .relaxed) }
        set { currentLead.store(max(newValue, 1), ordering: .relaxed) }
    }

    var complexity: Int32 {
        get { currentComplexity.load(ordering: .relaxed) }
        set { currentComplexity.store(newValue, ordering: .relaxed) }
    }
}
