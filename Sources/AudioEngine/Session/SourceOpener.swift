// How a play's source reaches its pipeline: a file or a direct URL is opened at once on an
// opener thread; a page is resolved by yt-dlp in the background first, for as long as the play
// (or the next play) it serves is wanted.
import EngineAPI
import ServiceSupport
import WireProtocol

struct SourceOpener: Sendable {
    let resolver: SourceResolver
    /// Where page resolves run after `play` has answered; it must run as a service for them to.
    let background: BackgroundTasks
    let fills: FillScheduler

    /// Hands a playback's source to an opener; for a page, `provide` (or `fail`) gets what yt-dlp
    /// found first. The resolution is called off when `owner` fires (the play it serves was
    /// stopped or replaced).
    func open(
        _ plan: SourceResolver.Plan, for playback: Playback, owner: CancellationSignal,
        fail: @escaping @Sendable (any Error) -> Void, provide: @escaping @Sendable (ResolvedSource) -> Void
    ) {
        guard case .page(let page) = plan else {
            fills.schedule([playback], on: .openers)
            return
        }
        let session = playback.sessionID.description
        background.spawn(owner: owner) { [resolver, fills] in
            do {
                provide(try await resolver.resolvePage(page, owner: session))
                fills.schedule([playback], on: .openers)
            } catch {
                fail(error)
            }
        }
    }

    /// A long pause outlived the signed stream URL: resolves the page again and carries on from
    /// `position`, or ends the play with the error.
    func reopen(_ playback: Playback, page: String, atMS position: Int64) {
        background.spawn(owner: playback.cancellation) { [resolver, fills] in
            do {
                playback.reopen(with: try await resolver.resolvePage(page, owner: playback.sessionID.description), atMS: position)
                fills.schedule([playback], on: .openers)
            } catch {
                playback.fail(error)
            }
        }
    }
}
