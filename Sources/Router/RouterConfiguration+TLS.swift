// HTTPS for the Router itself: browsers decode Opus with WebCodecs only in a secure context, so a
// Router reached by host name needs TLS — here (TONEARM_TLS_CERT, TONEARM_TLS_KEY) or from a reverse
// proxy in front (deploy/docker-compose.yml's `https` profile).
import NIOSSL

extension RouterConfiguration {
    /// The server's TLS settings from the PEM files, or nil when the Router serves plain HTTP.
    func tlsConfiguration() throws(RouterConfigurationError) -> TLSConfiguration? {
        guard let certificatePath = tlsCertificatePath, let keyPath = tlsKeyPath else { return nil }
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificatePath)
        } catch {
            throw RouterConfigurationError(
                message: "TONEARM_TLS_CERT=\(certificatePath) is not a readable PEM certificate chain: \(error)")
        }
        guard !chain.isEmpty else {
            throw RouterConfigurationError(message: "TONEARM_TLS_CERT=\(certificatePath) holds no certificate")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        } catch {
            throw RouterConfigurationError(message: "TONEARM_TLS_KEY=\(keyPath) is not a readable PEM private key: \(error)")
        }
        return TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
    }
}
