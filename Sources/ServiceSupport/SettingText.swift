// Reading the text of a TONEARM_* setting that both processes read the same way.

public enum SettingText {
    /// A yes/no setting: 1/0, true/false, yes/no, on/off (any case; empty is no); nil for anything else.
    public static func bool(_ text: String) -> Bool? {
        switch text.lowercased() {
        case "1", "true", "yes", "on": true
        case "0", "false", "no", "off", "": false
        default: nil
        }
    }

    /// What a refused yes/no setting's error says.
    public static func notABool(_ name: String, _ text: String) -> String {
        "\(name)=\(text) is not a boolean (1/0, true/false, yes/no, on/off)"
    }
}
