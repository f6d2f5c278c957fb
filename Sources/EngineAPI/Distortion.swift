// One of a session's filters (`Filters`): distortion, in Lavalink v4's shape.

/// Each sample x becomes offset + scale · (sinOffset + sin(sinScale·x)) · (cosOffset +
/// cos(cosScale·x)) · (tanOffset + tan(tanScale·x)), held within −1…1.
public struct Distortion: Sendable, Equatable, Codable {
    public var sinOffset: Double, sinScale: Double
    public var cosOffset: Double, cosScale: Double
    public var tanOffset: Double, tanScale: Double
    public var offset: Double, scale: Double

    public init(
        sinOffset: Double = 0, sinScale: Double = 1, cosOffset: Double = 0, cosScale: Double = 1,
        tanOffset: Double = 0, tanScale: Double = 1, offset: Double = 0, scale: Double = 1
    ) {
        self.sinOffset = sinOffset
        self.sinScale = sinScale
        self.cosOffset = cosOffset
        self.cosScale = cosScale
        self.tanOffset = tanOffset
        self.tanScale = tanScale
        self.offset = offset
        self.scale = scale
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        func value(_ key: CodingKeys, _ otherwise: Double) throws -> Double {
            try c.decodeIfPresent(Double.self, forKey: key) ?? otherwise
        }
        self.init(
            sinOffset: try value(.sinOffset, 0), sinScale: try value(.sinScale, 1),
            cosOffset: try value(.cosOffset, 0), cosScale: try value(.cosScale, 1),
            tanOffset: try value(.tanOffset, 0), tanScale: try value(.tanScale, 1),
            offset: try value(.offset, 0), scale: try value(.scale, 1))
    }
}
