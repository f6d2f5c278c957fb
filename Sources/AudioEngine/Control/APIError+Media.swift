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

    /// A source that cannot be opened or decoded; one that did not answer in time is the
    /// source's gateway timing out (504), not a request the caller could correct.
    static func unplayable(_ error: MediaError) -> APIError {
        guard error.kind != .timedOut else { return APIError(status: .gatewayTimeout, code: error.kind.rawValue, message: error.message) }
        return unprocessable(error.kind.rawValue, error.message)
    }
}
