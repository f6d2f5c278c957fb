// How failures inside a play become the errors its caller and its `error` event report.
import HTTPTypes
import ServiceSupport

extension APIError {
    /// Any failure inside a play, as the error its `error` event reports.
    static func wrap(_ error: any Error) -> APIError {
        if let error = error as? APIError { return error }
        if let error = error as? MediaError { return unplayable(error) }
        return APIError(status: .internalServerError, code: "internal", message: "\(error)")
    }

    /// A source that opened as a file but cannot be decoded.
    static func unplayable(_ error: MediaError) -> APIError {
        unprocessable(error.kind.rawValue, error.message)
    }
}
