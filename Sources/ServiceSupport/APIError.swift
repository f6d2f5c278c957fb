// Errors the Router's callers see: `{"error":{"code","message"}}` with the right status.
import Foundation
import Hummingbird
import Logging
import NIOCore
import WireProtocol

/// A refused request.
struct APIError: Error, HTTPResponseError, CustomStringConvertible {
    let status: HTTPResponse.Status
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

    var description: String { "\(code): \(message)" }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = Response.json(status: status, ErrorBody(code: code, message: message).jsonData())
        if let retryAfterSeconds { response.headers[.retryAfter] = String(retryAfterSeconds) }
        return response
    }

    static func badRequest(_ code: String, _ message: String) -> APIError {
        APIError(status: .badRequest, code: code, message: message)
    }
}

extension Response {
    /// A JSON response with the given bytes.
    static func json(status: HTTPResponse.Status, _ data: some Sequence<UInt8>) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// Turns every error into the JSON error shape, whatever threw it.
struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as HTTPError {
            throw APIError(
                status: error.status, code: error.status == .notFound ? "not_found" : "http_\(error.status.code)",
                message: error.body ?? error.status.reasonPhrase)
        } catch {
            // The details go to the log, not to whoever sent the request.
            context.logger.error("unexpected error", metadata: ["error": "\(error)", "path": "\(request.uri.path)"])
            throw APIError(
                status: .internalServerError, code: "internal",
                message: "something went wrong on the server; the operator's log has the details")
        }
    }
}
