// A relaying Router's clients, as the owner's Router serves them over one upstream per session
// (SharedUpstream): each command comes tagged with its client's own token, whose rights are
// checked here as that client's connection of its own would have been, and the answer goes back
// with the same tag, to that client alone.
import ServiceSupport
import WireProtocol

extension ClientConnections {
    /// The answer to one relayed client's command: a joining client's state message, or the
    /// command's reply under that client's token (a bot connection's needs the bot token; a
    /// playground's, one that may control the session; a browser token's plays count against the
    /// browsers' share).
    func relayedCommand(_ text: String, tag: RelayTag, on controller: SessionController, id: SessionID, kind: ClientKind) async -> String {
        if tag.join == true { return await controller.state.json() }
        do throws(APIError) {
            if kind == .bot {
                try access.requireBot(token: tag.token)
            } else {
                try access.authorize(token: tag.token, for: id)
            }
        } catch {
            return CommandReply.refusal(to: text, error)
        }
        let limited = kind == .browser && !access.isBot(token: tag.token)
        return await command(text, on: controller, id: id, limited: limited, bot: kind == .bot, callerToken: tag.token)
    }
}
