// The request context's WebSocket upgrade slot (RouterApplication.swift): it must let go of
// Hummingbird's handler box when the connection closes, or every connection stays in memory
// (the end-to-end measure is RouterEndToEndTests.clientsThatComeAndGoLeaveNoMemoryBehind).
import NIOCore
import NIOEmbedded
import Testing

@testable import TonearmRouter

@Suite struct WebSocketUpgradeSlotTests {
    @Test func theBoxIsHeldWhileTheConnectionIsOpenAndLetGoWhenItCloses() throws {
        let channel = EmbeddedChannel()
        let slot = WebSocketUpgradeSlot()
        _ = slot.reference(releasedWhenClosing: channel)
        _ = slot.reference(releasedWhenClosing: channel)
        #expect(slot.isHolding)
        try channel.close().wait()
        channel.embeddedEventLoop.run()
        #expect(!slot.isHolding)
    }

    /// A box taken for a connection that is already gone is let go of at once. (The release is
    /// registered outside the slot's lock: on a real event loop NIO may run it inside the call.
    /// EmbeddedEventLoop defers it, so this test would not catch a lock held there.)
    @Test func aConnectionAlreadyClosedIsLetGoAtOnce() throws {
        let channel = EmbeddedChannel()
        try channel.close().wait()
        let slot = WebSocketUpgradeSlot()
        _ = slot.reference(releasedWhenClosing: channel)
        channel.embeddedEventLoop.run()
        #expect(!slot.isHolding)
    }
}
