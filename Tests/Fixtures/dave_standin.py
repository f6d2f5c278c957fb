"""DAVE, Discord's end-to-end encryption of voice, played as Discord's voice server plays it, for
the stand-in voice server (`voice_server.py`). Written from the DAVE protocol's description
(daveprotocol.com) and RFC 9420; no MLS is written here:

- the server's part, the MLS group's *external sender*, is played with `rfc9420` (PyPI, an MLS
  implementation that can sign external proposals): the stand-in announces its external sender
  (op 25), collects each member's key package (op 26), proposes to add it (op 27, a PublicMessage
  signed by the external sender), relays the winning commit (op 29) and its welcome (op 30), and
  runs the transition (op 23 from every member, then op 22);
- a listener in the call, a DAVE member of its own, is played with `davey` (PyPI, the library
  discord.py 2.7 uses): it founds the group, joins every commit, and opens the DAVE frames that
  arrive, as a listener's client would. More listeners can join later (`Call.join_listener`), so
  that a member in the group commits their addition itself.

A call is one voice channel (the MLS group's id is the channel id, 8 bytes big-endian); members
are the users who identified for it with DAVE.
"""
import struct
import threading

import davey
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from rfc9420.backends.crypto.default_hpke import DefaultCryptoProvider
from rfc9420.codec.tls import read_varint, write_opaque_varint, write_uint16
from rfc9420.messages.data_structures import AddProposal, SenderType
from rfc9420.messages.messages import (
    ContentType,
    FramedContent,
    FramedContentAuthData,
    MLSMessage,
    WireFormat,
    sign_authenticated_content,
)

PROTOCOL_VERSION = 1
FIRST_LISTENER = 900000000000000001
MAGIC = b"\xfa\xfa"  # the last two bytes of every DAVE frame
SILENCE = b"\xf8\xff\xfe"

# Binary opcodes (server → client: u16 sequence, u8 op, payload; client → server: u8 op, payload)
EXTERNAL_SENDER, KEY_PACKAGE, PROPOSALS, COMMIT_WELCOME, ANNOUNCE_COMMIT, WELCOME = 25, 26, 27, 28, 29, 30
# JSON opcodes
PREPARE_TRANSITION, EXECUTE_TRANSITION, TRANSITION_READY, PREPARE_EPOCH, INVALID_COMMIT_WELCOME = 21, 22, 23, 24, 31


def varint(n: int) -> bytes:
    """MLS's variable-length integer (RFC 9420 §2.1.2)."""
    if n < 1 << 6:
        return bytes([n])
    if n < 1 << 14:
        return struct.pack(">H", 0x4000 | n)
    return struct.pack(">I", 0x80000000 | n)


def split_commit_welcome(data: bytes) -> tuple[bytes, bytes | None]:
    """Op 28's payload: an MLSMessage holding the commit (a PublicMessage), then the Welcome when
    the commit adds anyone. The commit's end is found by parsing it, as the server does."""
    if len(data) < 4 or struct.unpack(">HH", data[:4]) != (1, WireFormat.PUBLIC_MESSAGE):
        raise ValueError("op 28 does not start with a PublicMessage")
    content = FramedContent.deserialize(data[4:])
    if content.content_type != ContentType.COMMIT:
        raise ValueError("op 28 holds no commit")
    end = 4 + len(content.serialize())
    _, used = FramedContentAuthData.deserialize(data[end:], content.content_type)
    end += used
    # A member's PublicMessage ends with its membership tag, opaque<V>.
    length, after = read_varint(data, end)
    end = after + length
    if end > len(data):
        raise ValueError("op 28 ends inside its commit")
    return data[:end], (data[end:] or None)


class Member:
    """A user in the call with a voice socket: `send_binary(op, payload)` and `send_json(op, d)`
    are the socket's own (coroutines)."""

    def __init__(self, user_id: int, send_binary, send_json):
        self.user_id = user_id
        self.send_binary = send_binary
        self.send_json = send_json
        self.key_package: bytes | None = None


class Call:
    """One channel's DAVE group as the server sees it. Only the event loop calls in here, except
    `open_frame`, which the UDP thread calls; `lock` guards the davey sessions between them."""

    def __init__(self, channel_id: int):
        self.channel_id = channel_id
        self.lock = threading.Lock()
        key = ec.generate_private_key(ec.SECP256R1())
        self.signing_key = key.private_numbers().private_value.to_bytes(32, "big")
        public = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        # ExternalSender { SignaturePublicKey signature_key; Credential credential (basic) }
        self.external_sender = write_opaque_varint(public) + write_uint16(1) + write_opaque_varint(b"tonearm-standin")
        self.crypto = DefaultCryptoProvider(2)  # MLS_128_DHKEMP256_AES128GCM_SHA256_P256, DAVE's suite
        self.epoch = 0
        self.members: dict[int, Member] = {}      # users with a socket
        self.in_group: set[int] = set()            # users in the group's latest epoch
        self.listeners: dict[int, "davey.DaveSession"] = {}
        self.awaited: dict[int, set[int]] = {}     # transition id -> members yet to send op 23
        self.transition = 0
        self.proposed: dict[int, bytes] = {}       # user id -> key package in the proposals out
        self.events: list[dict] = []
        self.join_listener(FIRST_LISTENER)

    def note(self, kind: str, **detail) -> None:
        self.events.append({"kind": kind, **detail})

    def join_listener(self, user_id: int) -> None:
        """A listener's client joins the call: the first one founds the group alone; a later one
        is proposed like any member (its key package handed in as a socket member's would be)."""
        session = davey.DaveSession(PROTOCOL_VERSION, user_id, self.channel_id)
        session.set_external_sender(self.external_sender)
        with self.lock:
            self.listeners[user_id] = session
        if not self.in_group:
            self.in_group.add(user_id)
            self.note("founded", user_id=user_id)
        else:
            self.proposed_key_package(user_id, session.get_serialized_key_package())

    # What a member's socket hands in

    async def joined(self, member: Member) -> None:
        """After the Session Description that said DAVE: the external sender."""
        self.members[member.user_id] = member
        await member.send_binary(EXTERNAL_SENDER, self.external_sender)

    async def left(self, user_id: int) -> None:
        self.members.pop(user_id, None)
        for waiting in self.awaited.values():
            waiting.discard(user_id)

    async def key_package(self, user_id: int, data: bytes) -> None:
        member = self.members.get(user_id)
        if member is None:
            return
        member.key_package = data
        self.in_group.discard(user_id)
        await self.proposed_key_package_async(user_id, data)

    def proposed_key_package(self, user_id: int, data: bytes) -> None:
        """A listener's key package: no socket to wait for, so the proposal is handled now."""
        import asyncio
        asyncio.get_event_loop().create_task(self.proposed_key_package_async(user_id, data))

    async def proposed_key_package_async(self, user_id: int, data: bytes) -> None:
        """Op 27 to the group's members with a socket; the listeners in the group process it too.
        A socket member commits when there is one (the first commit wins); else a listener does."""
        self.proposed[user_id] = data
        message = sign_authenticated_content(
            group_id=struct.pack(">Q", self.channel_id), epoch=self.epoch, sender_leaf_index=0,
            authenticated_data=b"", content_type=ContentType.PROPOSAL, content=AddProposal(data).serialize(),
            signing_private_key=self.signing_key, crypto=self.crypto, group_context=None,
            wire_format=WireFormat.PUBLIC_MESSAGE, sender_type=SenderType.EXTERNAL)
        proposal = MLSMessage.from_public_message(message.auth_content).serialize()
        payload = bytes([0]) + varint(len(proposal)) + proposal  # append, one proposal
        committers = [self.members[u] for u in self.in_group if u in self.members]
        self.note("proposed", user_id=user_id, epoch=self.epoch, to=[m.user_id for m in committers])
        listener_commit = None
        with self.lock:
            for listener_id, session in self.listeners.items():
                if listener_id in self.in_group:
                    result = session.process_proposals(davey.ProposalsOperationType.append, payload[1:], None)
                    listener_commit = listener_commit or result
        for member in committers:
            await member.send_binary(PROPOSALS, payload)
        if not committers and listener_commit is not None:
            await self.commit(None, listener_commit.commit, listener_commit.welcome)

    async def commit_welcome(self, user_id: int, data: bytes) -> None:
        try:
            commit, welcome = split_commit_welcome(data)
        except Exception as error:  # noqa: BLE001 - a malformed op 28 is noted, as Discord would drop it
            self.note("bad_commit", user_id=user_id, error=str(error))
            return
        await self.commit(user_id, commit, welcome)

    async def commit(self, committer: int | None, commit: bytes, welcome: bytes | None) -> None:
        """The first commit for the epoch wins: op 29 to the members in the group, op 30 with the
        welcome to those it adds; the listeners process it at once."""
        content = FramedContent.deserialize(commit[4:])
        if content.epoch != self.epoch:
            self.note("late_commit", user_id=committer, epoch=content.epoch)
            return
        self.transition = self.transition % 65535 + 1
        transition = self.transition
        added = set(self.proposed)
        self.proposed = {}
        self.epoch += 1
        old_members = set(self.in_group)
        self.in_group |= added
        self.note("commit", committer=committer, epoch=self.epoch, transition=transition, added=sorted(added))
        with self.lock:
            for listener_id, session in self.listeners.items():
                if listener_id in old_members:
                    session.process_commit(commit)
                elif listener_id in added and welcome is not None:
                    session.process_welcome(welcome)
        self.awaited[transition] = {u for u in self.in_group if u in self.members}
        prefix = struct.pack(">H", transition)
        for user_id, member in list(self.members.items()):
            if user_id in old_members:
                await member.send_binary(ANNOUNCE_COMMIT, prefix + commit)
            elif user_id in added and welcome is not None:
                await member.send_binary(WELCOME, prefix + welcome)
        await self.maybe_execute(transition)

    async def transition_ready(self, user_id: int, transition: int) -> None:
        self.awaited.get(transition, set()).discard(user_id)
        await self.maybe_execute(transition)

    async def maybe_execute(self, transition: int) -> None:
        if transition in self.awaited and not self.awaited[transition]:
            del self.awaited[transition]
            self.note("executed", transition=transition)
            for member in list(self.members.values()):
                await member.send_json(EXECUTE_TRANSITION, {"transition_id": transition})

    # What the UDP thread hands in

    def open_frame(self, user_id: int, frame: bytes) -> tuple[str, bytes]:
        """A transport-opened frame from `user_id`: ("dave", opus) when a listener opened it,
        ("plain", frame) when it is not a DAVE frame, ("failed", frame) when no listener could."""
        if frame[-2:] != MAGIC:
            return "plain", frame
        with self.lock:
            for session in self.listeners.values():
                try:
                    return "dave", session.decrypt(user_id, davey.MediaType.audio, frame)
                except Exception:  # noqa: BLE001 - a frame this listener cannot open yet
                    continue
        return "failed", frame

    def report(self) -> dict:
        with self.lock:
            authenticator = self.listeners[FIRST_LISTENER].get_epoch_authenticator() if self.epoch else None
        code = davey.generate_displayable_code(authenticator, 30, 5) if authenticator else None
        return {"channel_id": str(self.channel_id), "epoch": self.epoch, "in_group": sorted(str(u) for u in self.in_group),
                "events": self.events, "privacy_code": code}
