// The errors callers of either server see: an HTTP status, a stable code, and a message that says
// what was wrong and what is accepted, rendered as `{"error":{"code","message"}}`.
import Foundation
public import Hummingbird
import Logging
import NIOCore

/// A refused request.
public struct APIError: Error, HTTPResponseError, CustomStringConvertible {
    public let status: HTTPResponse.Status
    public let code: String
    public let message: String
    /// Seconds after which the same request may succeed (a `Retry-After` header), for limits.
    public var retryAfterSeconds: Int?
    /// The methods the path does answer (an `Allow` header), for 405.
    public var allowedMethods: [HTTPRequest.Method] = []

    public init(status: HTTPResponse.Status, code: String, message: String, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String { "\(code): \(message)" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = Response.json(status: status, ErrorBody(code: code, message: message).jsonData())
        if let retryAfterSeconds { response.headers[.retryAfter] = String(retryAfterSeconds) }
        if !allowedMethods.isEmpty { response.headers[.allow] = allowedMethods.map(\.rawValue).joined(separator: ", ") }
        return response
    }

    /// 400: the request itself is wrong.
    public static func badRequest(_ code: String, _ message: String) -> APIError {
        APIError(status: .badRequest, code: code, message: message)
    }

    /// 422: the request is well formed but what it names cannot be done.
    public static func unprocessable(_ code: String, _ message: String) -> APIError {
        APIError(status: .unprocessableContent, code: code, message: message)
    }

    /// Work given up because whoever wanted it went away (a stopped or replaced play, a request
    /// whose client left). Nobody usually reads it; it keeps typed throws typed.
    public static let cancelled = APIError(
        status: .conflict, code: "cancelled", message: "the work was called off before it finished (the play or request that asked for it ended)")

    /// 500 for a failure no one anticipated: the details are for the operator's log only.
    public static let internalError = APIError(
        status: .internalServerError, code: "internal",
        message: "something went wrong on the server; the operator's log has the details")
}

extension Response {
    /// A JSON response with the given bytes.
    public static func json(status: HTTPResponse.Status, _ data: some Sequence<UInt8>) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// Turns every error into the JSON error shape, whatever threw it. With a route table, a path
/// that exists under other methods answers 405 with `Allow` rather than 404.
public struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let routes: RouteTable?

    public init(routes: RouteTable? = nil) { self.routes = routes }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as HTTPError {
            if error.status == .notFound, let methods = routes?.methods(for: request.uri.path), !methods.isEmpty,
                !methods.contains(request.method)
            {
                var refusal = APIError(
                    status: .methodNotAllowed, code: "method_not_allowed",
                    message: "\(request.uri.path) answers \(methods.map(\.rawValue).joined(separator: ", ")), not \(request.method)")
                refusal.allowedMethods = methods
                throw refusal
            }
            throw APIError(
                status: error.status, code: error.status == .notFound ? "not_found" : "http_\(error.status.code)",
                message: error.body ?? error.status.reasonPhrase)
        } catch {
            // The details go to the log, not to whoever sent the request.
            context.logger.error("unexpected error", metadata: ["error": "\(error)", "path": "\(request.uri.path)"])
            throw APIError.internalError
        }
    }
}
