// The load governor behind a lock, and what carries its decisions out: the complexity every
// play's renderer reads, the metrics, the refusals, and the report `/health` and the `load`
// event give.
import CoreMetrics
import EngineAPI
import HTTPTypes
import ServiceSupport
import Synchronization
import WireProtocol

/// Shared by the manager (admission, inside its lock) and the monitor (once a second).
final class LoadControl: Sendable {
    /// What a sample window adds up, kept for the report's per-minute figures.
    private struct Minute {
        var late = [UInt64](repeating: 0, count: 60)
        var tight = [UInt64](repeating: 0, count: 60)
        var index = 0
    }

    private let governor: Mutex<LoadGovernor>
    private let minute = Mutex(Minute())
    private let refused = Atomic<UInt64>(0)
    let render: RenderContext
    let configuredComplexity: Int32
    private let metrics: EngineMetrics?

    init(settings: LoadGovernor.Settings, render: RenderContext, metrics: EngineMetrics? = nil) {
        governor = Mutex(LoadGovernor(settings: settings))
        self.render = render
        configuredComplexity = settings.ladder.first ?? render.complexity
        self.metrics = metrics
        render.complexity = configuredComplexity
        metrics?.opusComplexity.record(Int(configuredComplexity))
        metrics?.encodeLead.record(render.lead)
        metrics?.cpuBudget.record(settings.budgetCores)
    }

    /// No budget: every play is taken and the complexity never moves.
    static func unlimited(render: RenderContext) -> LoadControl {
        LoadControl(settings: .init(budgetCores: 0, ladder: [render.complexity], transcodePrior: 0), render: render)
    }

    /// Takes one more play (or layer) beside `transcoding` and `passthrough` plays and `layers`,
    /// or refuses it with `503 engine_full`; one that fits only lower takes the steps down now.
    func admit(
        transcoding: Int, passthrough: Int, layers: Int = 0, adding: LoadGovernor.Addition = .play, now: Double
    ) throws(APIError) {
        let (decision, change, complexity) = governor.withLock { governor in
            let decision = governor.admission(transcoding: transcoding, passthrough: passthrough, layers: layers, adding: adding)
            var change: LoadGovernor.Change?
            switch decision {
            case .admitStepDown(let lower): change = governor.stepDown(to: lower, at: now)
            case .admit: break
            case .refuse: return (decision, change, governor.lowestComplexity)
            }
            governor.took(transcoding: transcoding, passthrough: passthrough, layers: layers, adding: adding)
            return (decision, change, governor.lowestComplexity)
        }
        if let change { apply(change) }
        guard case .refuse(let retryAfter) = decision else { return }
        refused.add(1, ordering: .relaxed)
        metrics?.admissionRefusals.increment()
        throw APIError(
            status: .serviceUnavailable, code: "engine_full",
            message: "the audio engine is at its CPU budget: \(transcoding) sessions transcode with \(layers) layers, even at "
                + "Opus complexity \(complexity) one more \(adding == .play ? "play" : "layer") would make every session late; "
                + "try again later or on another engine",
            retryAfterSeconds: retryAfter)
    }

    /// One second of the engine; carries out what the governor decides. True: the complexity changed.
    @discardableResult
    func observe(_ sample: LoadGovernor.Sample) -> Bool {
        minute.withLock { minute in
            minute.late[minute.index] = sample.late
            minute.tight[minute.index] = sample.tight
            minute.index = (minute.index + 1) % minute.late.count
        }
        let (change, lead, budget) = governor.withLock { ($0.observe(sample), $0.lead(after: sample), $0.budget) }
        metrics?.cpuUsed.record(sample.cpu)
        metrics?.cpuBudget.record(budget)
        if let lead {
            render.lead = lead
            metrics?.encodeLead.record(lead)
        }
        guard let change else { return false }
        apply(change)
        return true
    }

    private func apply(_ change: LoadGovernor.Change) {
        switch change {
        case .complexity(let complexity):
            render.complexity = complexity
            metrics?.opusComplexity.record(Int(complexity))
        }
    }

    /// The report, with the live counts.
    func report(transcoding: Int, passthrough: Int, layers: Int = 0) -> LoadReport {
        let (governor, minute) = (governor.withLock { $0 }, minute.withLock { $0 })
        let admitting: Bool
        if case .refuse = governor.admission(transcoding: transcoding, passthrough: passthrough, layers: layers) {
            admitting = false
        } else {
            admitting = true
        }
        let headroom = governor.headroom(transcoding: transcoding, passthrough: passthrough, layers: layers)
        return LoadReport(
            budgetCores: governor.budget, cpuCores: governor.last?.cpu ?? 0, transcoding: transcoding,
            passthrough: passthrough, headroomSessions: min(headroom, 1_000_000), complexity: Int(governor.complexity),
            configuredComplexity: Int(configuredComplexity), lateFramesPerMinute: minute.late.reduce(0, &+),
            tightFramesPerMinute: minute.tight.reduce(0, &+), admitting: admitting,
            refusals: refused.load(ordering: .relaxed), stolenShare: governor.stolenShare)
    }
}
