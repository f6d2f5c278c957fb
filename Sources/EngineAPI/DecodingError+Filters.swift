// How a filter's JSON that cannot be read is worded: the same sentence from both processes.

extension DecodingError {
    /// The filter (one of `Filters.names`) whose object the error is in: the first key of a
    /// filters object, or the one under a body's `filters`.
    var filterName: String? {
        let path: [any CodingKey]
        switch self {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context),
            .dataCorrupted(let context):
            path = context.codingPath
        @unknown default: return nil
        }
        let keys = path.map(\.stringValue)
        let start = keys.first == "filters" ? 1 : 0
        guard keys.count > start, Filters.names.contains(keys[start]) else { return nil }
        return keys[start]
    }

    /// The words both processes answer `invalid_filters` with when a filter's JSON has the wrong
    /// shape, naming the field (not Swift's description of the error); nil when the error is not
    /// inside a filter.
    public var filterProblem: String? {
        guard let name = filterName else { return nil }
        if name == "equalizer" {
            return "equalizer is a list of {\"band\": 0 to 14, \"gain\": -0.25 to 1.0}: \(fieldProblem)"
        }
        return "\(name) is an object of numbers: \(fieldProblem)"
    }

    /// What is wrong, in a few words that name the field.
    private var fieldProblem: String {
        switch self {
        case .keyNotFound(let key, _): "an entry has no \"\(key.stringValue)\""
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            "\(context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")) has the wrong type or is out of range"
        @unknown default: "it cannot be read"
        }
    }
}
