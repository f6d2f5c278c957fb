// What the engine can still take, as a value: each second the monitor gives it what the last
// second cost (the engine's CPU, its sessions by kind, frames that were late or nearly so, the
// host's time the hypervisor took), and
// it keeps an estimate of what one session of each kind costs, lowers the Opus complexity of
// transcoding sessions a step when the slack runs short and raises it again when there is room,
// and answers whether one more play fits. It holds no clock and does no I/O: the monitor and the
// manager carry its decisions out.

/// The engine's load governor.
package struct LoadGovernor: Sendable {
    package struct Settings: Sendable, Equatable {
        /// CPU the engine may use for its sessions, in cores (its cores × `TONEARM_CPU_BUDGET`);
        /// 0: no admission and no degradation.
        var budgetCores: Double
        /// The complexities transcoding sessions step through under load, highest first: the
        /// configured one, then each lower step down to `TONEARM_MIN_COMPLEXITY`.
        var ladder: [Int32]
        /// What one transcoding session is taken to cost (cores) until it has been measured: the
        /// engine times libopus at start-up.
        var transcodePrior: Double
        /// How much dearer than the prior a session is taken to be until one has been measured:
        /// the prior is libopus alone on a quiet core, and a session costs more than that share
        /// once every core is busy (1 in tests; the engine's own: `LoadSettings`).
        var unmeasuredMargin = 1.0
        /// The frames transcoding sessions encode ahead, deepest last: the configured lead, then
        /// the deeper ones the governor may take where frames came late (`leads(from:)`).
        var leads: [Int] = []
        /// Seconds between two deeper leads (a burst of plays starting can make frames late for a
        /// few seconds: the deepest lead is reached within two), and of no late frame before the
        /// lead is made a step shallower again.
        var leadDeeperSeconds = 1.0
        var leadShallowerSeconds = 600.0
        /// Seconds between two steps down (a step's saving shows in the next second's CPU).
        var stepDownSeconds = 2.0
        /// Seconds of room (no late or tight frames, CPU low enough for the step above) before a step up.
        var stepUpSeconds = 10.0

        var enabled: Bool { budgetCores > 0 }
    }

    /// One second of the engine, as the monitor measured it.
    struct Sample: Sendable, Equatable {
        /// Seconds on the engine's monotonic clock (`SessionManager.monotonicSeconds`).
        var at: Double
        /// Cores the engine used over the second.
        var cpu: Double
        /// Plays being heard that transcode (or are still opening), and that pass packets through.
        var transcoding: Int
        var passthrough: Int
        /// The same counts at the start of the second: an estimate is only taken from a steady second.
        var transcodingBefore: Int
        var passthroughBefore: Int
        /// Deadlines a transcoding session met with its last frame ahead (the refill since the
        /// tick before had not come back: nearly late), and frames late (nulled or deficit).
        var tight: UInt64
        var late: UInt64
        /// Frames sent by transcoding sessions over the second.
        var transcodedFrames: UInt64
        /// Layers mixed into those plays, now and at the start of the second.
        var layers = 0
        var layersBefore = 0
        /// The share of the host's CPU time the hypervisor took over the second (`/proc/stat`'s
        /// steal; 0 on a host of its own).
        var stolen = 0.0
    }

    /// What the governor answers to one more play.
    enum Admission: Equatable {
        case admit
        /// It fits once transcoding sessions encode lower: admitted, and the steps down to the
        /// ladder's `step` are taken now.
        case admitStepDown(to: Int)
        /// It does not fit even at the lowest complexity allowed.
        case refuse(retryAfterSeconds: Int)
    }

    /// What the governor asks of the engine after a sample.
    enum Change: Equatable {
        case complexity(Int32)
    }

    /// The relative cost of a whole transcoding session (decode, resample, encode, pace) at each
    /// complexity, to the same session at 10: libopus is about three quarters of a session
    /// (docs/benchmarks.md, the profile) and its own cost at each step is the ffmpeg CLI's
    /// (§ Opus complexity: what each step costs). Used until a step has been measured itself.
    static let relativeCost: [Int32: Double] = [
        10: 1.0, 9: 1.0, 8: 1.0, 7: 0.89, 6: 0.80, 5: 0.77, 4: 0.72, 3: 0.71, 2: 0.73, 1: 0.68, 0: 0.60,
    ]

    /// What a layer costs beside its play, as a share of a transcoding session: its own decode,
    /// resampler and the mix, no encode (13–20 % over the session alone, docs/benchmarks.md
    /// "Layers and cue points"; the higher figure).
    static let layerShare = 0.2

    /// How much of the hypervisor's share the governor still holds a second later: it takes the
    /// highest recent second's and lets it fade by a tenth a second, so a host whose time is taken
    /// in bursts is judged by its bursts (a stall of tens of milliseconds makes frames late).
    static let stolenFade = 0.9

    let settings: Settings
    /// Where on the ladder transcoding sessions are now.
    private(set) var step = 0
    /// Cores per transcoding session, measured, by complexity.
    private(set) var measured: [Int32: Double] = [:]
    /// Cores per passed-through session, and the engine's own with nothing playing.
    private(set) var passthroughCost = 0.0004
    private(set) var baseCost = 0.01
    /// When the complexity last changed, and when the slack last ran short.
    private var changedAt = -Double.infinity
    private var pressureAt = -Double.infinity
    /// Where the last second was short (frames late or nearly so, or the CPU over the budget)
    /// with transcoding sessions already at the lowest complexity, the sessions' worth it had
    /// (`units`): the host carried no more, whatever the estimates say, so no play or layer that
    /// would bring the engine back to that is admitted until a second is not short. A second in
    /// which plays or layers stopped counts the most it carried. With nothing playing there is no
    /// one to protect: a play is then judged by the budget alone (a queue's next track, after the
    /// one before it ended on a busy host, is not refused).
    private(set) var saturatedUnits: Double?
    /// The most sessions' worth a play or layer taken since the last sample brought the engine to.
    private(set) var takenUnits = 0.0
    /// Where on `settings.leads` the lead is now, when it last changed, and when a frame was last late.
    private(set) var leadStep = 0
    private var leadChangedAt = -Double.infinity
    private var lateAt = -Double.infinity
    /// The last sample, for the load report.
    private(set) var last: Sample?
    /// The share of the host's time the hypervisor takes, as the governor holds it (0–1).
    private(set) var stolenShare = 0.0

    /// The budget in force: the configured one less the share the hypervisor takes. A session's
    /// CPU is measured without the time taken from it, but it is late all the same when its time
    /// is taken: on such a host the same sessions need that much more of every core.
    var budget: Double { settings.budgetCores * (1 - stolenShare) }

    init(settings: Settings) {
        self.settings = settings
    }

    var complexity: Int32 { settings.ladder.isEmpty ? 10 : settings.ladder[step] }
    var lowestComplexity: Int32 { settings.ladder.last ?? 10 }

    /// Cores one transcoding session costs at `complexity`: measured there, else scaled from the
    /// step measured nearest, else the prior scaled.
    func transcodeCost(at complexity: Int32) -> Double {
        if let cost = measured[complexity] { return cost }
        let relative = Self.relativeCost[complexity] ?? 1
        let known = measured.min { abs($0.key - complexity) < abs($1.key - complexity) }
        if let (at, cost) = known { return cost * relative / (Self.relativeCost[at] ?? 1) }
        return settings.transcodePrior * relative * settings.unmeasuredMargin
    }

    /// What the engine's sessions would cost with `transcoding` and `passthrough` plays and
    /// `layers` over them at `complexity`.
    func predicted(transcoding: Int, passthrough: Int, layers: Int = 0, at complexity: Int32) -> Double {
        baseCost + Double(passthrough) * passthroughCost + Self.units(transcoding, layers) * transcodeCost(at: complexity)
    }

    /// Transcoding sessions and layers in transcoding sessions' worth.
    static func units(_ transcoding: Int, _ layers: Int) -> Double { Double(transcoding) + Double(layers) * layerShare }

    /// Whether one more play (or layer) fits beside `transcoding` and `passthrough` plays and
    /// `layers` (live counts; a play not yet open counts as transcoding). A new play is taken to
    /// transcode until it is open.
    func admission(transcoding: Int, passthrough: Int, layers: Int = 0, adding: Addition = .play) -> Admission {
        guard settings.enabled else { return .admit }
        let protecting = transcoding + passthrough + layers > 0
        let (transcoding, passthrough, layers) = adding.counts(transcoding, passthrough, layers)
        if protecting, let limit = saturatedUnits, Self.units(transcoding, layers) >= limit { return .refuse(retryAfterSeconds: 5) }
        if predicted(transcoding: transcoding, passthrough: passthrough, layers: layers, at: complexity) <= budget {
            return .admit
        }
        for lower in settings.ladder.indices.dropFirst(step + 1)
        where predicted(transcoding: transcoding, passthrough: passthrough, layers: layers, at: settings.ladder[lower])
            <= budget
        {
            return .admitStepDown(to: lower)
        }
        return .refuse(retryAfterSeconds: 5)
    }

    /// Remembers what a play or layer just admitted brings the engine to (`admission`'s counts).
    mutating func took(transcoding: Int, passthrough: Int, layers: Int = 0, adding: Addition = .play) {
        let (transcoding, _, layers) = adding.counts(transcoding, passthrough, layers)
        takenUnits = max(takenUnits, Self.units(transcoding, layers))
    }

    /// What is asked to fit: a play (taken to transcode until it is open), or a layer over a
    /// transcoding play or over a passed-through one (which then transcodes while it lasts).
    package enum Addition: Sendable, Equatable {
        case play
        case layer(overPassthrough: Bool)

        func counts(_ transcoding: Int, _ passthrough: Int, _ layers: Int) -> (Int, Int, Int) {
            switch self {
            case .play: (transcoding + 1, passthrough, layers)
            case .layer(let overPassthrough):
                overPassthrough && passthrough > 0 ? (transcoding + 1, passthrough - 1, layers + 1) : (transcoding, passthrough, layers + 1)
            }
        }
    }

    /// How many more transcoding plays fit now, at the lowest complexity allowed.
    func headroom(transcoding: Int, passthrough: Int, layers: Int = 0) -> Int {
        guard settings.enabled else { return Int.max }
        let free = budget - predicted(transcoding: transcoding, passthrough: passthrough, layers: layers, at: lowestComplexity)
        let each = transcodeCost(at: lowestComplexity)
        guard free > 0, each > 0 else { return 0 }
        let fits = Int(min(free / each, Double(Int32.max)))
        guard let limit = saturatedUnits, transcoding + passthrough + layers > 0 else { return fits }
        let below = (limit - Self.units(transcoding, layers)).rounded(.up) - 1
        return min(fits, Int(max(min(below, Double(Int32.max)), 0)))
    }

    /// Takes the steps down an admission asked for (one by default), at `now`.
    mutating func stepDown(to lower: Int? = nil, at now: Double) -> Change? {
        let target = min(lower ?? step + 1, settings.ladder.count - 1)
        guard target > step else { return nil }
        step = target
        changedAt = now
        pressureAt = now
        return .complexity(complexity)
    }

    /// Learns from one second, and says what should change.
    mutating func observe(_ sample: Sample) -> Change? {
        last = sample
        if sample.stolen.isFinite {
            stolenShare = max(min(max(sample.stolen, 0), 1), stolenShare * Self.stolenFade)
        }
        learn(from: sample)
        let framesDue = max(sample.transcodedFrames, 1)
        let short = sample.late > 0 || Double(sample.tight) > 0.02 * Double(framesDue) || sample.cpu > budget
        let lowest = step >= settings.ladder.count - 1
        // A second in which plays stopped was short carrying the most it had: what it began with,
        // or what a play or layer taken during it brought the engine to.
        let carried = max(
            Self.units(sample.transcoding, sample.layers), Self.units(sample.transcodingBefore, sample.layersBefore),
            takenUnits)
        takenUnits = 0
        saturatedUnits = settings.enabled && short && lowest ? carried : nil
        guard settings.enabled, settings.ladder.count > 1 else { return nil }
        if short { pressureAt = sample.at }
        if short, sample.at - changedAt >= settings.stepDownSeconds {
            return stepDown(at: sample.at)
        }
        // A step up only when the step above would still leave a tenth of the budget free, and
        // the slack has been there for a while.
        guard step > 0, sample.at - pressureAt >= settings.stepUpSeconds, sample.at - changedAt >= settings.stepUpSeconds
        else { return nil }
        let above = settings.ladder[step - 1]
        let then = predicted(transcoding: sample.transcoding, passthrough: sample.passthrough, layers: sample.layers, at: above)
        guard then <= 0.9 * budget, Double(sample.tight) <= 0.005 * Double(framesDue) else { return nil }
        step -= 1
        changedAt = sample.at
        return .complexity(complexity)
    }

    /// The lead in force: the frames transcoding sessions encode ahead of the clock.
    var lead: Int? { settings.leads.isEmpty ? nil : settings.leads[leadStep] }

    /// Deepens the lead a step after a second with a late frame, at most every
    /// `leadDeeperSeconds`: where the workers sometimes do not run for longer than the slack a
    /// lead leaves (20 ms at 2), frames come late at any load, and a deeper lead rides those
    /// moments out, for about 60 KB per frame per transcoding session. A step shallower after
    /// `leadShallowerSeconds` without a late frame. The new lead, or nil when it stays.
    mutating func lead(after sample: Sample) -> Int? {
        guard settings.enabled, settings.leads.count > 1 else { return nil }
        if sample.late > 0 {
            lateAt = sample.at
            guard leadStep < settings.leads.count - 1, sample.at - leadChangedAt >= settings.leadDeeperSeconds else { return nil }
            leadStep += 1
        } else {
            guard leadStep > 0, sample.at - lateAt >= settings.leadShallowerSeconds,
                sample.at - leadChangedAt >= settings.leadShallowerSeconds
            else { return nil }
            leadStep -= 1
        }
        leadChangedAt = sample.at
        return lead
    }

    /// Updates the cost estimates from a steady second: the engine alone when nothing plays,
    /// passed-through sessions when only they play, transcoding ones from what is left.
    private mutating func learn(from sample: Sample) {
        let steady =
            sample.transcoding == sample.transcodingBefore && sample.passthrough == sample.passthroughBefore
            && sample.layers == sample.layersBefore
        guard steady, sample.cpu.isFinite, sample.cpu >= 0 else { return }
        if sample.transcoding == 0 && sample.passthrough == 0 {
            baseCost = Self.blend(baseCost, sample.cpu)
        } else if sample.transcoding == 0 && sample.passthrough >= 50 {
            passthroughCost = Self.blend(passthroughCost, max(sample.cpu - baseCost, 0) / Double(sample.passthrough))
        } else if sample.transcoding >= 4 {
            let rest = sample.cpu - baseCost - Double(sample.passthrough) * passthroughCost
            let each = max(rest, 0) / Self.units(sample.transcoding, sample.layers)
            measured[complexity] = measured[complexity].map { Self.blend($0, each) } ?? each
        }
    }

    private static func blend(_ old: Double, _ new: Double) -> Double { 0.7 * old + 0.3 * new }
}
