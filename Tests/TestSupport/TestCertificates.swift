// A certificate authority made for one test, and a server certificate it signed, with the openssl
// command line: what an operator's private CA (or Caddy's `tls internal`) gives a deployment.
import Foundation

public struct TestCertificates: Sendable {
    /// The authority's certificate (PEM): what a client trusts.
    public let authority: String
    /// The server's certificate chain and key (PEM), for TONEARM_TLS_CERT and TONEARM_TLS_KEY.
    public let certificate: String
    public let key: String

    /// A fresh authority and a certificate for `names` (DNS names; 127.0.0.1 is always included).
    public init(in directory: String, names: [String] = ["localhost", "tonearm.test"]) throws {
        authority = directory + "/ca.pem"
        certificate = directory + "/server.pem"
        key = directory + "/server-key.pem"
        let authorityKey = directory + "/ca-key.pem", request = directory + "/server.csr"
        let extensions = directory + "/server.ext"
        try runTool("openssl", [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=Tonearm test authority", "-keyout", authorityKey, "-out", authority,
        ])
        try runTool("openssl", [
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=\(names[0])",
            "-keyout", key, "-out", request,
        ])
        let alternativeNames = (names.map { "DNS:\($0)" } + ["IP:127.0.0.1"]).joined(separator: ",")
        try "subjectAltName=\(alternativeNames)\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
            .write(toFile: extensions, atomically: true, encoding: .utf8)
        try runTool("openssl", [
            "x509", "-req", "-in", request, "-CA", authority, "-CAkey", authorityKey, "-CAcreateserial",
            "-days", "2", "-extfile", extensions, "-out", certificate,
        ])
    }
}
