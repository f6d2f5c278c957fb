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
    /// timed on a few frames of noise at `complexity` (three quarters of a session's work), in cores.
    static func calibratedTranscodeCost(complexity: Int32) -> Double {
        guard let encoder = try? OpusEncoder(configuration: .init(complexity: complexity)) else { return 0.01 }
        var noise = [Float](repeating: 0, count: OpusEncoder.frameFloats)
        var seed: UInt32 = 1
        for index in noise.indices {
            seed = seed &* 1_664_525 &+ 1_013_904_223
            noise[index] = Float(Int32(bitPattern: seed)) / Float(Int32.max) * 0.3
        }
        let frames = 25
        let started = ResourceUsage.threadCPUSeconds()
        for _ in 0..<frames { _ = try? noise.withUnsafeBufferPointer { try encoder.encode($0) { $0.count } } }
        let perFrame = (ResourceUsage.threadCPUSeconds() - started) / Double(frames)
        return perFrame * 50 / 0.75
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
            transcodePrior: LoadGovernor.Settings.calibratedTranscodeCost(complexity: configured))
    }
}
