// The JSON error shape both processes answer with, and the Router reads from the engine:
// `{"error":{"code":"…","message":"…"}}`.
public import Foundation

/// A refused request, as sent over HTTP by the engine and the Router alike.
public struct ErrorBody: Codable, Sendable, Equatable, Error {
    public struct Detail: Codable, Sendable, Equatable {
        public var code: String
        public var message: String
    }
    public var error: Detail

    public init(code: String, message: String) {
        self.error = Detail(code: code, message: message)
    }

    public var code: String { error.code }
    public var message: String { error.message }

    /// The encoded JSON object.
    public func jsonData() -> Data {
        (try? JSONCoding.encoder.encode(self)) ?? Data(#"{"error":{"code":"internal","message":"unencodable error"}}"#.utf8)
    }
}
