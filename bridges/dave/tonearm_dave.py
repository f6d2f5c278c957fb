#!/usr/bin/env python3
"""tonearm-dave: DAVE (Discord's end-to-end encryption of voice) for the Router's own voice
connections, one process beside each pair. The MLS side and the per-frame encryption are davey's
(PyPI; the library discord.py 2.7 uses, OpenMLS underneath): nothing of MLS is written here.

The Router connects to the Unix socket given with --socket and keeps one connection; every
message, both ways, is

    u32 length (big-endian, of what follows) | u8 kind | u32 voice connection id | payload

Router → here:
    1 OPEN     JSON {"user_id", "channel_id", "protocol_version"}: a voice connection whose Session
               Description said DAVE; answered with its key package (a SEND_BINARY of op 26)
    2 BINARY   a binary message from the voice gateway as it arrived (u16 sequence, u8 op, data):
               ops 25 external sender, 27 proposals, 29 announce commit, 30 welcome
    3 JSON     a JSON message from the voice gateway ({"op", "d"}): ops 21, 22, 24
    4 ENCRYPT  one Opus frame; answered in order by a FRAME
    5 CLOSE    the voice connection ended
Here → Router:
    101 SEND_BINARY  u8 op | data, to send on the voice gateway as a binary message (ops 26, 28)
    102 SEND_JSON    a JSON text to send on the voice gateway (ops 23, 31)
    103 STATE        JSON {"ready", "privacy_code"}: when either changes (the code at each epoch)
    104 FRAME        the DAVE frame, or nothing while the group is not ready (the frame is
                     dropped: a call that speaks DAVE hears no plain audio)

A message that cannot be read ends the Router's connection here (it connects again); a davey
error on one voice connection is logged and recovered as discord.py recovers (op 31, a new key
package), never reaching another.
"""
import argparse
import asyncio
import json
import logging
import os
import signal
import struct

import davey

OPEN, BINARY, JSON_IN, ENCRYPT, CLOSE = 1, 2, 3, 4, 5
SEND_BINARY, SEND_JSON, STATE, FRAME = 101, 102, 103, 104
KEY_PACKAGE, COMMIT_WELCOME = 26, 28
EXTERNAL_SENDER, PROPOSALS, ANNOUNCE_COMMIT, WELCOME = 25, 27, 29, 30
PREPARE_TRANSITION, EXECUTE_TRANSITION, TRANSITION_READY, PREPARE_EPOCH, INVALID_COMMIT_WELCOME = 21, 22, 23, 24, 31
MAX_MESSAGE = 1 << 20

log = logging.getLogger("tonearm-dave")


class Voice:
    """One voice connection's DAVE session and its pending transitions."""

    def __init__(self, user_id: int, channel_id: int, version: int):
        self.user_id, self.channel_id, self.version = user_id, channel_id, version
        self.session = davey.DaveSession(version, user_id, channel_id)
        self.pending: dict[int, int] = {}  # transition id -> protocol version
        self.said = (False, None)  # (ready, privacy code) last told to the Router


class Link:
    """The Router's connection: what it asks, answered on the same stream in order. Answers are
    gathered in `out` and written once per read (many frames arrive together: one per guild each
    20 ms)."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.voices: dict[int, Voice] = {}
        self.out = bytearray()

    def put(self, kind: int, connection: int, payload: bytes) -> None:
        self.out += struct.pack(">IBI", 5 + len(payload), kind, connection)
        self.out += payload

    def send_binary(self, connection: int, op: int, data: bytes) -> None:
        self.put(SEND_BINARY, connection, bytes([op]) + data)

    def send_json(self, connection: int, op: int, d: dict) -> None:
        self.put(SEND_JSON, connection, json.dumps({"op": op, "d": d}).encode())

    def state(self, connection: int, voice: Voice) -> None:
        """Tells the Router when the group becomes ready or not, and its privacy code at each
        epoch (the code every member's client shows)."""
        ready = bool(voice.session.ready)
        code = None
        if ready:
            try:
                authenticator = voice.session.get_epoch_authenticator()
                code = davey.generate_displayable_code(authenticator, 30, 5) if authenticator else None
            except Exception:  # noqa: BLE001 - the code is informational
                code = None
        if (ready, code) == voice.said:
            return
        voice.said = (ready, code)
        self.put(STATE, connection, json.dumps({"ready": ready, "privacy_code": code}).encode())

    def handle(self, kind: int, connection: int, payload: bytes) -> None:
        if kind == OPEN:
            request = json.loads(payload)
            voice = Voice(int(request["user_id"]), int(request["channel_id"]), int(request.get("protocol_version") or 1))
            self.voices[connection] = voice
            self.send_binary(connection, KEY_PACKAGE, voice.session.get_serialized_key_package())
            return
        if kind == CLOSE:
            self.voices.pop(connection, None)
            return
        voice = self.voices.get(connection)
        if kind == ENCRYPT:
            frame = b""
            if voice is not None and voice.session.ready:
                try:
                    frame = voice.session.encrypt_opus(payload)
                except Exception as error:  # noqa: BLE001 - this frame is dropped, the next tried
                    log.warning("connection %d: a frame was not encrypted: %s", connection, error)
            self.put(FRAME, connection, frame)
            return
        if voice is None:
            return
        try:
            if kind == BINARY:
                self.gateway_binary(connection, voice, payload)
            elif kind == JSON_IN:
                self.gateway_json(connection, voice, json.loads(payload))
        except Exception as error:  # noqa: BLE001 - one connection's bad message stays its own
            log.warning("connection %d: DAVE message failed: %s", connection, error)
        self.state(connection, voice)

    def gateway_binary(self, connection: int, voice: Voice, message: bytes) -> None:
        if len(message) < 3:
            return
        op, data = message[2], message[3:]
        if op == EXTERNAL_SENDER:
            voice.session.set_external_sender(data)
        elif op == PROPOSALS and data:
            kind = davey.ProposalsOperationType.append if data[0] == 0 else davey.ProposalsOperationType.revoke
            result = voice.session.process_proposals(kind, data[1:])
            if isinstance(result, davey.CommitWelcome):
                self.send_binary(connection, COMMIT_WELCOME, result.commit + (result.welcome or b""))
        elif op in (ANNOUNCE_COMMIT, WELCOME) and len(data) >= 2:
            transition = struct.unpack_from(">H", data)[0]
            try:
                if op == ANNOUNCE_COMMIT:
                    voice.session.process_commit(data[2:])
                else:
                    voice.session.process_welcome(data[2:])
            except Exception as error:  # noqa: BLE001 - recovered as the protocol says
                log.warning("connection %d: invalid commit or welcome (transition %d): %s", connection, transition, error)
                self.send_json(connection, INVALID_COMMIT_WELCOME, {"transition_id": transition})
                voice.session.reinit(voice.version, voice.user_id, voice.channel_id)
                self.send_binary(connection, KEY_PACKAGE, voice.session.get_serialized_key_package())
                return
            if transition != 0:
                voice.pending[transition] = voice.version
                self.send_json(connection, TRANSITION_READY, {"transition_id": transition})

    def gateway_json(self, connection: int, voice: Voice, message: dict) -> None:
        op, d = message.get("op"), message.get("d") or {}
        if op == PREPARE_TRANSITION:
            transition = int(d.get("transition_id") or 0)
            voice.pending[transition] = int(d.get("protocol_version") or 0)
            if transition != 0:
                if voice.pending[transition] == 0:
                    voice.session.set_passthrough_mode(True, 120)
                self.send_json(connection, TRANSITION_READY, {"transition_id": transition})
        elif op == EXECUTE_TRANSITION:
            voice.pending.pop(int(d.get("transition_id") or 0), None)
        elif op == PREPARE_EPOCH and int(d.get("epoch") or 0) == 1:
            # A new group for this protocol version: a new session and key package.
            voice.version = int(d.get("protocol_version") or voice.version)
            voice.session.reinit(voice.version, voice.user_id, voice.channel_id)
            self.send_binary(connection, KEY_PACKAGE, voice.session.get_serialized_key_package())


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    link = Link(writer)
    log.debug("a connection")  # the Router's, or a health check's
    buffer = bytearray()
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            buffer += data
            # Every complete message read so far, then one write of all the answers.
            offset = 0
            while len(buffer) - offset >= 4:
                length = struct.unpack_from(">I", buffer, offset)[0]
                if length < 5 or length > MAX_MESSAGE:
                    raise ValueError(f"a message of {length} bytes")
                if len(buffer) - offset - 4 < length:
                    break
                kind, connection = struct.unpack_from(">BI", buffer, offset + 4)
                link.handle(kind, connection, bytes(buffer[offset + 9:offset + 4 + length]))
                offset += 4 + length
            del buffer[:offset]
            if link.out:
                writer.write(link.out)
                link.out = bytearray()
                await writer.drain()
    except ConnectionError:
        pass
    except (ValueError, KeyError, TypeError) as error:
        log.warning("an unreadable message: closing the Router's connection: %s", error)
    finally:
        if link.voices:
            log.info("the Router's connection ended: %d DAVE sessions dropped", len(link.voices))
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", default=os.environ.get("TONEARM_DAVE_SOCKET", "/run/tonearm/dave.sock"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    server = await asyncio.start_unix_server(serve, path=args.socket)
    # SIGTERM (a container's stop) ends it cleanly: the socket goes, the exit status is 0.
    stop = asyncio.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(number, stop.set)
    print(json.dumps({"socket": args.socket, "dave_protocol_version": davey.DAVE_PROTOCOL_VERSION}), flush=True)
    async with server:
        await stop.wait()
    if os.path.exists(args.socket):
        os.unlink(args.socket)


if __name__ == "__main__":
    asyncio.run(main())
