// swift-tools-version:6.1
// Tonearm: AudioEngine (decode → Opus → paced frames on a Unix socket) and Router (fan-out to
// WebSocket clients), sharing one WireProtocol module that alone knows the byte layout.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "tonearm",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "AudioEngine", targets: ["AudioEngineMain"]),
        .executable(name: "Router", targets: ["RouterMain"]),
        .library(name: "WireProtocol", targets: ["WireProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        .systemLibrary(name: "COpus", pkgConfig: "opus", providers: [.apt(["libopus-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CFFmpeg",
            pkgConfig: "libavformat libavcodec libswresample libavutil",
            providers: [.apt(["libavformat-dev", "libavcodec-dev", "libswresample-dev", "libavutil-dev"])]
        ),
        .target(
            name: "WireProtocol",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        // The engine's control API as both processes see it: the JSON bodies of its routes.
        .target(name: "EngineAPI", dependencies: ["WireProtocol"], swiftSettings: swiftSettings),
        // What both servers share beyond the wire: the JSON error shape and its middleware, one JSON
        // configuration, process figures, address ranges for their settings, background work and
        // its cancellation.
        .target(
            name: "ServiceSupport",
            dependencies: [
                "WireProtocol",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AudioEngine",
            dependencies: [
                "WireProtocol", "EngineAPI", "ServiceSupport", "COpus", "CFFmpeg",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            exclude: ["Main"],
            swiftSettings: swiftSettings
        ),
        // The executable is only its command line: `Sources/AudioEngine/Main`.
        .executableTarget(
            name: "AudioEngineMain",
            dependencies: [
                "AudioEngine",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/AudioEngine/Main",
            swiftSettings: swiftSettings
        ),
        // The Router's code (a module name of its own: `Router` is also Hummingbird's router type).
        .target(
            name: "TonearmRouter",
            dependencies: [
                "WireProtocol", "EngineAPI", "ServiceSupport", "CSQLite", "DiscordVoice",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            path: "Sources/Router",
            exclude: ["Main"],
            resources: [.copy("Resources/Public")],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "RouterMain",
            dependencies: [
                "TonearmRouter",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/Router/Main",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "TestSupport",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Tests/TestSupport",
            swiftSettings: swiftSettings
        ),
        // A guild's Discord voice connection, made by Tonearm (docs/discord.md): the voice
        // gateway's machine and its WebSocket, UDP with IP discovery, RTP, the transport
        // encryption, the silence frames.
        .target(
            name: "DiscordVoice",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "DiscordVoiceTests",
            dependencies: [
                "DiscordVoice", "TestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "WireProtocolTests",
            dependencies: [
                "WireProtocol", "ServiceSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AudioEngineTests",
            dependencies: [
                "AudioEngine", "WireProtocol", "EngineAPI", "ServiceSupport", "TestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "RouterTests",
            dependencies: [
                "TonearmRouter", "WireProtocol", "EngineAPI", "ServiceSupport", "TestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "AudioEngine", "WireProtocol", "ServiceSupport", "TestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)

// Everything under Benchmarks/ is kept out of the normal build, and so out of the image, whose
// build context holds only Package.swift, Sources and Tests (deploy/Dockerfile, checked by
// deploy/check-build-context.sh). The load tool's listeners are part of the test build
// (TONEARM_TESTABLE: `make test` builds them, and CI's load-tool step takes them from there) and
// of the bench targets' (TONEARM_BENCHMARKS); the micro-benchmarks and their dependency exist only
// with TONEARM_BENCHMARKS.
if Context.environment["TONEARM_BENCHMARKS"] != nil || Context.environment["TONEARM_TESTABLE"] != nil {
    package.products.append(.executable(name: "tonearm-listeners", targets: ["TonearmListeners"]))
    // The load tool's WebSocket listeners (Benchmarks/Load): raw sockets, no dependencies.
    package.targets.append(contentsOf: [
        .systemLibrary(name: "CEpoll", path: "Benchmarks/Load/CEpoll"),
        .executableTarget(
            name: "TonearmListeners",
            dependencies: ["CEpoll"],
            path: "Benchmarks/Load/Listeners",
            swiftSettings: swiftSettings
        ),
    ])
}
if Context.environment["TONEARM_BENCHMARKS"] != nil {
    package.dependencies.append(
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]))
    package.targets.append(
        .executableTarget(
            name: "TonearmBenchmarks",
            dependencies: [
                "WireProtocol", "EngineAPI", "AudioEngine", "TonearmRouter", "TestSupport",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/TonearmBenchmarks",
            swiftSettings: swiftSettings,
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ))
}

// libFuzzer targets (Tests/Fuzz, docs/reliability.md), only when TONEARM_FUZZ is set (`make fuzz`).
// Tonearm's own modules are compiled with the fuzzer's coverage and AddressSanitizer; the
// dependencies are built as in any release build, so the fuzz build shares `.build/release` with
// it and recompiles only Tonearm's modules (the next normal build recompiles them back). Each
// target's main hands it to libFuzzer's driver (CFuzzDriver).
if Context.environment["TONEARM_FUZZ"] != nil {
    // Only what the fuzz targets need is in its package: one `swift build` then makes all four at
    // once (the engine's module beside the Router's), and the executables and the test bundle
    // `make test` linked stay as they were.
    package.targets.removeAll { [.executable, .test].contains($0.type) }
    package.products.removeAll { $0.name != "WireProtocol" }
    let sanitize = ["-sanitize=fuzzer,address"]
    for target in package.targets where ["WireProtocol", "EngineAPI", "ServiceSupport", "AudioEngine", "TonearmRouter"].contains(target.name) {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(sanitize + ["-enable-testing"])]
    }
    let fuzzTargets: [(String, [Target.Dependency])] = [
        ("FuzzWire", ["WireProtocol", .product(name: "NIOCore", package: "swift-nio")]),
        ("FuzzEvents", ["WireProtocol"]),
        ("FuzzCommands", ["TonearmRouter", "WireProtocol", "ServiceSupport"]),
        ("FuzzMedia", ["AudioEngine", "WireProtocol", "EngineAPI", "ServiceSupport", "CFFmpeg"]),
    ]
    package.targets.append(.target(name: "CFuzzDriver", path: "Tests/Fuzz/CFuzzDriver"))
    for (name, dependencies) in fuzzTargets {
        package.products.append(.executable(name: name, targets: [name]))
        package.targets.append(
            .executableTarget(
                name: name, dependencies: dependencies + ["CFuzzDriver"], path: "Tests/Fuzz/\(name)",
                swiftSettings: swiftSettings + [.unsafeFlags(sanitize)], linkerSettings: [.unsafeFlags(sanitize)]))
    }
}

// One build for every test (`make test`, CI): the release build the end-to-end tests start and the
// image takes also holds the test targets, when TONEARM_TESTABLE is set. Tonearm's own modules are
// then compiled with `-enable-testing`, for `@testable import`; the dependencies are built as in
// any release build, so `make run`'s build (without it) recompiles only Tonearm's modules.
if Context.environment["TONEARM_TESTABLE"] != nil {
    for target in package.targets where target.type == .regular && !target.name.hasPrefix("C") {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(["-enable-testing"])]
    }
    // The test targets themselves are compiled without optimisation: their code drives processes,
    // sockets and Tonearm's modules (optimised, as shipped) and analyses audio in TestSupport (also
    // optimised), so it runs no slower, and the release optimiser took about 230 of a 588 s build on
    // them (EndToEndTests alone 144 s; -Onone: 97 s for all five; the Swift suites took 899 s with
    // it against 895 s without, 2026-11-30).
    for target in package.targets where target.type == .test {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(["-Onone"])]
    }
}

// ThreadSanitizer for the unit tests (`make test-tsan`), only when TONEARM_TSAN is set: Tonearm's
// own modules and its test targets are compiled with `-sanitize=thread`, the dependencies as in
// any release build, so the TSan build shares `.build/release` with `make test` and recompiles only
// Tonearm's modules (about 4 minutes, instead of another build of everything). Races inside a
// dependency are that dependency's to find; what is instrumented is every access of Tonearm's.
// What its run never starts is not in its package: the end-to-end and voice test targets, the
// executables and the load tool's listeners (the executables `make test` built stay as they were).
if Context.environment["TONEARM_TSAN"] != nil {
    let notRun: Set<String> = ["EndToEndTests", "DiscordVoiceTests", "AudioEngineMain", "RouterMain", "TonearmListeners"]
    package.targets.removeAll { notRun.contains($0.name) }
    package.products.removeAll { ["AudioEngine", "Router", "tonearm-listeners"].contains($0.name) }
    for target in package.targets where [.regular, .executable, .test].contains(target.type) {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(["-sanitize=thread"])]
        target.linkerSettings = (target.linkerSettings ?? []) + [.unsafeFlags(["-sanitize=thread"])]
    }
}
