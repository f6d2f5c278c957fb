import Foundation
import HTTPTypes
import ServiceSupport
import TestSupport
import Testing

@testable import AudioEngine

@Suite struct MediaLibraryTests {
    let directory: TemporaryDirectory
    let library: MediaLibrary

    init() throws {
        directory = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("media/sub"), withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: directory.file("media/a.mp3"), contents: Data([1]))
        FileManager.default.createFile(atPath: directory.file("media/sub/b.mp3"), contents: Data([1]))
        FileManager.default.createFile(atPath: directory.file("secret.mp3"), contents: Data([1]))
        try FileManager.default.createSymbolicLink(
            atPath: directory.file("media/escape.mp3"), withDestinationPath: directory.file("secret.mp3"))
        library = MediaLibrary(directory: directory.file("media"))
    }

    @Test func filesInsideResolveByNameOrPath() throws {
        #expect(try library.resolve("a.mp3").location.hasSuffix("/media/a.mp3"))
        #expect(try library.resolve("sub/b.mp3").displayName == "b.mp3")
        #expect(try library.resolve(library.root + "/sub/b.mp3").location.hasSuffix("/media/sub/b.mp3"))
    }

    @Test(arguments: ["../secret.mp3", "sub/../../secret.mp3", "/etc/passwd", "escape.mp3"])
    func nothingOutsideIsOpened(url: String) {
        #expect { try library.resolve(url) } throws: { ($0 as? APIError)?.code == "outside_media_dir" }
    }

    @Test(arguments: ["file:///etc/passwd", "ftp://host/a.mp3", "FILE:a.mp3"])
    func otherSchemesAreRefused(url: String) {
        #expect { try library.resolve(url) } throws: {
            guard let error = $0 as? APIError else { return false }
            return error.code == "unsupported_scheme" && error.status == .unprocessableContent
        }
    }

    @Test func missingFilesAndEmptyURLsAreClearErrors() {
        #expect { try library.resolve("nope.mp3") } throws: { ($0 as? APIError)?.code == "source_not_found" }
        #expect { try library.resolve("sub") } throws: { ($0 as? APIError)?.code == "source_not_found" }
        #expect { try library.resolve("  ") } throws: { ($0 as? APIError)?.status == .badRequest }
    }
}
