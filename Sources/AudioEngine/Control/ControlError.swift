// The errors a caller of the control API can see: an HTTP status, a stable code, and a message
// that says what was wrong and what is accepted.
import Hummingbird
import NIOCore
import WireProtocol

/// A refused control request, rendered as `{"error":{"code","message"}}`.
package struct ControlError: Error, HTTPResponseError, CustomStringConvertible {
    package let status: HTTPResponse.Status
    let code: String
    let message: String
    /// Seconds after which the same request may succeed (a `Retry-After` header), for limits.
    var retryAfterSeconds: Int?

    init(status: HTTPResponse.Status, code: String, message: String, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    package var description: String { "\(code): \(message)" }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = ErrorBody(code: code, message: message).response(status: status)
        if let retryAfterSeconds { response.headers[.retryAfter] = String(retryAfterSeconds) }
        return response
    }

    static func badRequest(_ message: String, code: String = "bad_request") -> ControlError {
        ControlError(status: .badRequest, code: code, message: message)
    }

    static func unprocessable(_ code: String, _ message: String) -> ControlError {
        ControlError(status: .unprocessableContent, code: code, message: message)
    }

    /// Any failure inside a play, as the error its `error` event reports.
    static func wrap(_ error: any Error) -> ControlError {
        if let error = error as? ControlError { return error }
        if let error = error as? MediaError { return unplayable(error) }
        return ControlError(status: .internalServerError, code: "internal", message: "\(error)")
    }

    /// A source that opened as a file but cannot be decoded.
    static func unplayable(_ error: MediaError) -> ControlError {
        unprocessable(error.kind.rawValue, error.message)
    }
}

extension ErrorBody {
    /// This error as a JSON response.
    func response(status: HTTPResponse.Status) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: jsonData())))
    }
}
