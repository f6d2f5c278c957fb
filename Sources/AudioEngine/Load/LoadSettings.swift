// The load governor's settings for this engine: its budget in cores, the complexities it steps
// through, and what a transcoding session is taken to cost before one has been measured.
import ServiceSupport

extension LoadGovernor.Settings {
    /// The complexities a session steps through: the configured one, then those below it that
    /// cost measurably less (8 and 9 make the same stream as 10 at these settings, for the same
    /// CPU: docs/benchmarks.md), down to `minimum`.
    static func ladder(from configured: Int32, downTo minimum: Int32) -> [Int32] {
        [configured] + [7, 5, 3, 0].filter { $0 < configured && $0 >= minimum }
    }

    /// What one transcoding session costs on this host, before any has been measured: libopus
    /// timed on noise at `complexity` (three quarters of a session's work), in cores. Ten frames
    /// first, untimed (a cold encoder and cache); then the median of five rounds of twenty, since
    /// one round of 25 read 0.53–0.71 % of a core at complexity 5 in five starts of one engine on
    /// one host (2026-11-30), where a session measured 0.61 %.
    static func calibratedTranscodeCost(complexity: Int32) -> Double {
        guard let encoder = try? OpusEncoder(configuration: .init(complexity: complexity)) else { return 0.01 }
        var noise = [Float](repeating: 0, count: OpusEncoder.frameFloats)
        var seed: UInt32 = 1
        for index in noise.indices {
            seed = seed &* 1_664_525 &+ 1_013_904_223
            noise[index] = Float(Int32(bitPattern: seed)) / Float(Int32.max) * 0.3
        }
        func encode(_ frames: Int) {
            for _ in 0..<frames { _ = try? noise.withUnsafeBufferPointer { try encoder.encode($0) { $0.count } } }
        }
        encode(10)
        let frames = 20
        let rounds = (0..<5).map { _ in
            let started = ResourceUsage.threadCPUSeconds()
            encode(frames)
            return (ResourceUsage.threadCPUSeconds() - started) / Double(frames)
        }
        let perFrame = rounds.sorted()[rounds.count / 2]
        return perFrame * 50 / 0.75
    }
}

extension LoadGovernor.Settings {
    /// The engine's margin on its prior: on one host (2026-11-30) the prior read 0.49–0.64 % of a
    /// core at complexity 5 over six starts, where sessions measured 0.61 % with both cores busy,
    /// and a burst of 130 % of the ceiling admitted on the prior alone was 13 % over the budget,
    /// with late frames (docs/benchmarks.md, "Overload").
    static let unmeasuredMargin = 1.3

    /// The leads the governor steps through from the configured one: twice and four times it, up
    /// to 8 frames (on 2026-11-30 the overload row at 130 % of the ceiling had 496 and 25 frames
    /// late in 60 s with leads of 2 and 4, and none with 8: docs/benchmarks.md). A configured
    /// lead of 8 or more stays as it is.
    static func leads(from configured: Int) -> [Int] {
        [configured] + [configured * 2, configured * 4].filter { $0 > configured && $0 <= 8 }
    }
}

extension EngineConfiguration {
    /// The governor's settings, nil when the budget is 0 (no admission, no degradation).
    func loadSettings() -> LoadGovernor.Settings? {
        guard cpuBudgetPercent > 0 else { return nil }
        let configured = playback.encoder.complexity
        return LoadGovernor.Settings(
            budgetCores: ResourceUsage.availableCores() * cpuBudgetPercent / 100,
            ladder: LoadGovernor.Settings.ladder(from: configured, downTo: min(minimumComplexity, configured)),
            transcodePrior: LoadGovernor.Settings.calibratedTranscodeCost(complexity: configured),
            unmeasuredMargin: LoadGovernor.Settings.unmeasuredMargin,
            leads: LoadGovernor.Settings.leads(from: playback.leadFrames))
    }
}
