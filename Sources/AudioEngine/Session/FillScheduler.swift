// Where a play's work runs: fills (open, encode ahead, render again) on two thread pools, and
// the closing of ended plays. The manager decides what to claim and when; this carries it out.
import EngineAPI
import NIOPosix
import ServiceSupport

/// Runs fill jobs and closes ended plays, never on the pacer thread, an event loop or Swift's
/// cooperative pool: they block in C.
struct FillScheduler: Sendable {
    /// The pool a fill runs on.
    enum Pool {
        /// Refills the tick claimed: niced (`workerNice`), so the pacer always gets a core.
        case workers
        /// A play's opening and first frames, a seek, a change of sound: the engine's priority.
        case openers
    }

    let workers: NIOThreadPool
    let openers: NIOThreadPool
    let configuration: PlaybackConfiguration
    let metrics: EngineMetrics
    let network: SourceNetwork
    let render: RenderContext

    /// Refill jobs a tick submits at most: enough to keep every worker busy and balanced, few
    /// enough that thousands of passthrough sessions do not cost thousands of thread-pool
    /// submissions and wake-ups every 20 ms (profiled: at 3,000 sessions the pacer fell behind).
    static let refillJobsPerTick = 16

    /// Claims and fills each play that has work (nothing for one a fill already holds).
    func schedule(_ playbacks: [Playback], on pool: Pool) {
        schedule(claimed: playbacks.compactMap { playback in playback.claimFillNumber(refillAt: Int.max).map { (playback, $0) } }, on: pool)
    }

    /// Runs a fill for each play already claimed, with the number of its claim.
    func schedule(claimed: [(Playback, UInt64)], on pool: Pool) {
        guard !claimed.isEmpty else { return }
        let lead = render.lead
        let passthroughLead = configuration.passthroughLeadFrames
        let encoder = configuration.encoder
        let metrics = metrics
        let network = network
        let render = render
        // One frame beyond a refill's own: a lead made deeper grows a frame a tick (PlaybackWorker).
        let perVisit = configuration.refillFrames + 1
        let nice = pool == .workers ? configuration.workerNice : 0
        let threads = pool == .workers ? workers : openers
        let perJob = (claimed.count + Self.refillJobsPerTick - 1) / Self.refillJobsPerTick
        for start in stride(from: 0, to: claimed.count, by: perJob) {
            let job = claimed[start..<min(start + perJob, claimed.count)]
            threads.submit { _ in
                if nice != 0 { ThreadPriority.ensureNice(nice) }
                for (playback, claim) in job {
                    playback.fill(
                        lead: lead, passthroughLead: passthroughLead, encoder: encoder, metrics: metrics, network: network,
                        render: render, claim: claim, perVisit: perVisit)
                }
            }
        }
    }

    /// Closes ended plays' sources on an opener thread: closing (FFmpeg, the read-ahead thread)
    /// can block.
    func retire(_ playbacks: [Playback]) {
        guard !playbacks.isEmpty else { return }
        openers.submit { _ in
            for playback in playbacks { playback.close() }
        }
    }
}
