#!/usr/bin/env python3
"""A stand-in Discord voice server for Tonearm's tests, written from Discord's documented voice
protocol (gateway version 8 over TLS, UDP with IP discovery, RTP sealed with the "rtpsize" AEAD
modes). It is the judge of Tonearm's voice connection: it opens every packet as Discord would
(OpenSSL for AES-256-GCM, libsodium for XChaCha20-Poly1305), decodes the Opus with libopus, and
keeps what a listener in the call would notice: the tone, the sequence and timestamp continuity,
the silence frames, Speaking, the packet intervals.

DAVE (--dave): a client that offers DAVE gets protocol version 1 in its Session Description and
takes part in the call's MLS group, which the stand-in runs as Discord's voice server does, with a
listener of its own in the call that opens every DAVE frame (`dave_standin.py`). The report then
says per stream how many frames were opened with DAVE, arrived plain, or could not be opened.
With --dave-required it refuses (4017) an Identify that offers no DAVE protocol version, as
Discord has done since 2026-03-02.

--authority DIR shares one certificate authority among stand-ins (the server a call moves to).
Prints one JSON line when ready: {"ws_port", "udp_port", "control_port", "ca"}. The control API
(plain HTTP on loopback): GET /report, GET /levels?since=T (each decoded packet that arrived
after T, epoch seconds: its arrival and RMS level, per stream), POST /close?code=N (closes the voice sockets with N; 4006
also forgets their sessions, so a resume is refused), POST /reset (forgets the packets heard),
POST /channel?server_id=G&channel_id=C (the voice channel of guild G's call, the DAVE group's id;
by default the guild id), POST /listener?server_id=G&user_id=U (another listener joins G's call).
"""
import argparse
import asyncio
import datetime
import json
import os
import secrets
import signal
import socket
import ssl
import struct
import sys
import tempfile
import threading
import time

import nacl.bindings
import numpy
from aiohttp import WSMsgType, web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.x509.oid import NameOID
import discord.opus

import dave_standin

parser = argparse.ArgumentParser()
parser.add_argument("--modes", default="aead_aes256_gcm_rtpsize,aead_xchacha20_poly1305_rtpsize")
parser.add_argument("--dave", action="store_true", help="take part in DAVE with clients that offer it")
parser.add_argument("--dave-required", action="store_true")
parser.add_argument("--heartbeat-ms", type=float, default=13750.0)
parser.add_argument("--ack-delay-ms", type=float, default=0.0, help="answer each heartbeat this much later (a distant server)")
parser.add_argument("--token", default="voice-token", help="the only token Identify and Resume may carry")
parser.add_argument("--count-only", action="store_true", help="open the packets but decode no Opus (for many guilds)")
parser.add_argument("--authority", help="a directory for the certificate authority, shared by stand-ins (default: a new one)")
args = parser.parse_args()
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

SILENCE = b"\xf8\xff\xfe"
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def certificates(directory):
    """A certificate for localhost and 127.0.0.1, signed by the authority in `directory` (made
    there by the first stand-in that needs it: a second stand-in, the server a call moves to, is
    then trusted by whoever trusts the first)."""
    import ipaddress
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_path, ca_key_path = os.path.join(directory, "ca.pem"), os.path.join(directory, "ca-key.pem")
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Tonearm stand-in voice CA")])
    if os.path.exists(ca_path) and os.path.exists(ca_key_path):
        ca_key = serialization.load_pem_private_key(open(ca_key_path, "rb").read(), None)
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
              .not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                           content_commitment=False, key_encipherment=False, data_encipherment=False,
                                           key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        with open(ca_key_path + ".tmp", "wb") as f:
            f.write(ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
        with open(ca_path + ".tmp", "wb") as f:
            f.write(ca.public_bytes(serialization.Encoding.PEM))
        os.replace(ca_key_path + ".tmp", ca_key_path)
        os.replace(ca_path + ".tmp", ca_path)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    leaf_directory = tempfile.mkdtemp(prefix="tonearm-voice-")
    paths = {"ca.pem": ca_path, "cert.pem": os.path.join(leaf_directory, "cert.pem"),
             "key.pem": os.path.join(leaf_directory, "key.pem")}
    with open(paths["cert.pem"], "wb") as f:
        f.write(leaf.public_bytes(serialization.Encoding.PEM))
    with open(paths["key.pem"], "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return paths


class Session:
    """One voice session: what Identify created, kept across resumes."""

    def __init__(self, identify):
        self.identify = identify
        self.ssrc = secrets.randbelow(2**31) + 1
        self.mode = None
        self.key = None
        self.aes = None
        self.socket = None
        self.call = None            # the DAVE call, once the Session Description said DAVE
        self.user_id = int(identify.get("user_id") or 0)


class Judge:
    """Everything heard, for GET /report. The UDP thread and the event loop share it (`lock`)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sessions = {}          # session_id -> Session
        self.by_ssrc = {}
        self.sockets = set()
        self.channels = {}          # server_id -> channel id (DAVE's group id)
        self.calls = {}             # server_id -> dave_standin.Call
        self.events = []            # {"t", "kind", …}
        self.reset()

    def reset(self):
        with self.lock:
            self.packets = {}       # ssrc -> [(arrival, sequence, timestamp, counter, is_silence)]
            self.dave = {}          # ssrc -> {"dave", "plain", "failed"}: frames opened with DAVE, or not
            self.unopened = 0
            self.pcm = {}           # ssrc -> [numpy int16 stereo frames]
            self.decoders = {}

    def note(self, kind, **detail):
        self.events.append({"t": time.time(), "kind": kind, **detail})

    def heard(self, packet, arrival):
        """One datagram that is not IP discovery, with the kernel's arrival time."""
        if len(packet) < 12 + 16 + 4 or packet[0] != 0x80 or packet[1] != 0x78:
            return
        header, sealed, counter = packet[:12], packet[12:-4], packet[-4:]
        sequence, timestamp, ssrc = struct.unpack(">HII", header[2:12])
        with self.lock:
            session = self.by_ssrc.get(ssrc)
            if session is None or session.key is None:
                self.unopened += 1
                return
            try:
                if session.mode == "aead_xchacha20_poly1305_rtpsize":
                    opus = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(sealed, header, counter + bytes(20), session.key)
                else:
                    opus = session.aes.decrypt(counter + bytes(8), sealed, header)
            except Exception:
                self.unopened += 1
                return
            if session.call is not None and opus != SILENCE:
                kind, opus = session.call.open_frame(session.user_id, opus)
                counts = self.dave.setdefault(ssrc, {"dave": 0, "plain": 0, "failed": 0})
                counts[kind] += 1
                if kind == "failed":
                    return
            self.packets.setdefault(ssrc, []).append(
                (arrival, sequence, timestamp, struct.unpack(">I", counter)[0], opus == SILENCE))
            if not args.count_only:
                decoder = self.decoders.setdefault(ssrc, discord.opus.Decoder())
                pcm = numpy.frombuffer(decoder.decode(opus, fec=False), dtype=numpy.int16)
                self.pcm.setdefault(ssrc, []).append(pcm)

    def levels(self, since):
        """Each decoded packet that arrived after `since` (epoch seconds): (arrival, RMS dBFS), per
        stream. Packets are decoded in the order they arrive, so packets and PCM frames pair up."""
        with self.lock:
            return {str(ssrc): [(arrival, level([pcm])) for (arrival, *_), pcm in zip(packets, self.pcm.get(ssrc, []))
                                if arrival > since]
                    for ssrc, packets in self.packets.items()}

    def report(self):
        with self.lock:
            streams = {}
            deviations = []
            for ssrc, packets in self.packets.items():
                sequence_breaks = timestamp_breaks = 0
                for before, after in zip(packets, packets[1:]):
                    step = (after[1] - before[1]) % 65536
                    if step != 1:
                        sequence_breaks += 1
                    elif (after[2] - before[2]) % 2**32 < 960:
                        timestamp_breaks += 1
                audio = [p for p in packets if not p[4]]
                gaps = [1000 * (b[0] - a[0]) for a, b in zip(audio, audio[1:])]
                deviations.extend(abs(gap - 20) for gap in gaps)
                frames = self.pcm.get(ssrc, [])
                streams[str(ssrc)] = {
                    "packets": len(packets),
                    "silence_frames": sum(1 for p in packets if p[4]),
                    "sequence_breaks": sequence_breaks,
                    "timestamp_breaks": timestamp_breaks,
                    "timestamp_steps": sorted({(b[2] - a[2]) % 2**32 for a, b in zip(packets, packets[1:])})[:20],
                    "counters_in_order": all(b[3] == a[3] + 1 for a, b in zip(packets, packets[1:])),
                    "gap_ms_p99": float(numpy.percentile(gaps, 99)) if gaps else None,
                    "gap_ms_max": max(gaps) if gaps else None,
                    "dominant_hz": dominant(frames[-100:]),
                    "level_dbfs": level(frames[-25:]),
                    "dave": self.dave.get(ssrc),
                    "first_at": packets[0][0],
                    "last_at": packets[-1][0],
                }
            return {
                "now": time.time(),
                "streams": streams,
                # |interval − 20 ms| between consecutive audio packets of every stream, at the
                # kernel's arrival times; a packet more than 20 ms late counts as late.
                "intervals": {
                    "count": len(deviations),
                    "p50_ms": float(numpy.percentile(deviations, 50)) if deviations else None,
                    "p99_ms": float(numpy.percentile(deviations, 99)) if deviations else None,
                    "max_ms": max(deviations) if deviations else None,
                    "late": sum(1 for d in deviations if d > 20),
                },
                "unopened": self.unopened,
                "sessions": {k: {"ssrc": s.ssrc, "mode": s.mode} for k, s in self.sessions.items()},
                "events": self.events,
                "open_sockets": len(self.sockets),
                "calls": {server: call.report() for server, call in self.calls.items()},
            }


def dominant(frames):
    """The strongest frequency of the last frames' left channel, in Hz (None when silent)."""
    if not frames:
        return None
    left = numpy.concatenate(frames)[0::2].astype(numpy.float64)
    if numpy.max(numpy.abs(left)) < 100:
        return None
    spectrum = numpy.abs(numpy.fft.rfft(left * numpy.hanning(len(left))))
    return float(numpy.argmax(spectrum) * 48000 / len(left))


def level(frames):
    """The RMS level of the last frames, in dB below full scale (None when none were heard)."""
    if not frames:
        return None
    samples = numpy.concatenate(frames).astype(numpy.float64) / 32768
    return float(20 * numpy.log10(max(numpy.sqrt(numpy.mean(samples * samples)), 1e-9)))


judge = Judge()


def receive(sock):
    """The UDP socket's reader, on a thread of its own so that the arrival times are the
    kernel's (SO_TIMESTAMPNS) whatever the event loop is doing: IP discovery is answered, every
    other datagram judged."""
    while True:
        data, ancillary, _, address = sock.recvmsg(2048, socket.CMSG_SPACE(16))
        arrival = time.time()
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                seconds, nanoseconds = struct.unpack("qq", value[:16])
                arrival = seconds + nanoseconds / 1e9
        if len(data) == 74 and data[:4] == b"\x00\x01\x00\x46":
            ssrc = struct.unpack(">I", data[4:8])[0]
            ip = address[0].encode().ljust(64, b"\x00")
            # Noted before the answer: the client's next message (select) may otherwise be noted
            # first, by the event loop, while this thread waits for the lock.
            with judge.lock:
                judge.note("discovery", ssrc=ssrc)
            sock.sendto(b"\x00\x02\x00\x46" + struct.pack(">I", ssrc) + ip + struct.pack(">H", address[1]), address)
        else:
            judge.heard(data, arrival)


async def voice_socket(request):
    socket = web.WebSocketResponse(heartbeat=None, autoping=True)
    await socket.prepare(request)
    judge.sockets.add(socket)
    judge.note("open", version=request.query.get("v"))
    seq = 0
    session = None

    async def send(op, data):
        nonlocal seq
        seq += 1
        await socket.send_str(json.dumps({"op": op, "d": data, "seq": seq}))

    async def send_binary(op, payload):
        nonlocal seq
        seq += 1
        if not socket.closed:
            await socket.send_bytes(struct.pack(">HB", seq & 0xFFFF, op) + payload)

    async def send_json(op, data):
        if not socket.closed:
            await send(op, data)

    def member(session):
        return dave_standin.Member(session.user_id, send_binary, send_json)

    await send(8, {"heartbeat_interval": args.heartbeat_ms})
    try:
        async for message in socket:
            if message.type == WSMsgType.BINARY:
                # DAVE's binary messages from a member: u8 opcode, then the payload.
                data = message.data
                if session is None or session.call is None or not data:
                    await socket.close(code=4001, message=b"Unknown opcode")
                    break
                judge.note("dave_binary", op=data[0], size=len(data))
                if data[0] == dave_standin.KEY_PACKAGE:
                    await session.call.key_package(session.user_id, data[1:])
                elif data[0] == dave_standin.COMMIT_WELCOME:
                    await session.call.commit_welcome(session.user_id, data[1:])
                continue
            if message.type != WSMsgType.TEXT:
                continue
            payload = json.loads(message.data)
            op, data = payload.get("op"), payload.get("d") or {}
            if op == 0:
                judge.note("identify", **{k: data.get(k) for k in ("server_id", "user_id", "session_id", "max_dave_protocol_version")})
                if data.get("token") != args.token:
                    await socket.close(code=4004, message=b"Authentication failed")
                    break
                if args.dave_required and not data.get("max_dave_protocol_version"):
                    await socket.close(code=4017, message=b"E2EE/DAVE protocol required")
                    break
                session = Session(data)
                session.socket = socket
                with judge.lock:
                    judge.sessions[data["session_id"]] = session
                    judge.by_ssrc[session.ssrc] = session
                await send(2, {"ssrc": session.ssrc, "ip": "127.0.0.1", "port": udp_port, "modes": args.modes.split(","),
                               "heartbeat_interval": 1})
            elif op == 1:
                mode = (data.get("data") or {}).get("mode")
                judge.note("select", mode=mode, address=(data.get("data") or {}).get("address"), port=(data.get("data") or {}).get("port"))
                if session is None or mode not in args.modes.split(","):
                    await socket.close(code=4016, message=b"Unknown encryption mode")
                    break
                key = secrets.token_bytes(32)
                # The UDP thread reads the key last: everything it needs is set before it.
                session.mode, session.aes = mode, AESGCM(key)
                session.key = key
                dave = args.dave and (session.identify.get("max_dave_protocol_version") or 0) >= dave_standin.PROTOCOL_VERSION
                await send(4, {"mode": mode, "secret_key": list(session.key),
                               "dave_protocol_version": dave_standin.PROTOCOL_VERSION if dave else 0})
                if dave:
                    server = str(session.identify.get("server_id"))
                    if server not in judge.calls:
                        judge.calls[server] = dave_standin.Call(int(judge.channels.get(server, server)))
                    session.call = judge.calls[server]
                    await session.call.joined(member(session))
            elif op == 3:
                judge.note("heartbeat", seq_ack=data.get("seq_ack"))
                if args.ack_delay_ms > 0:
                    async def acknowledge(nonce):
                        await asyncio.sleep(args.ack_delay_ms / 1000)
                        await send(6, {"t": nonce})
                    asyncio.get_running_loop().create_task(acknowledge(data.get("t")))
                else:
                    await send(6, {"t": data.get("t")})
            elif op == 5:
                judge.note("speaking", speaking=data.get("speaking"), ssrc=data.get("ssrc"))
            elif op == 7:
                judge.note("resume", session_id=data.get("session_id"), seq_ack=data.get("seq_ack"))
                session = judge.sessions.get(data.get("session_id"))
                if session is None or data.get("token") != args.token:
                    await socket.close(code=4006, message=b"Session no longer valid")
                    break
                session.socket = socket
                await send(9, None)
                if session.call is not None:
                    session.call.members[session.user_id] = member(session)
            elif op == dave_standin.TRANSITION_READY and session is not None and session.call is not None:
                judge.note("transition_ready", transition_id=data.get("transition_id"))
                await session.call.transition_ready(session.user_id, int(data.get("transition_id") or 0))
            elif op == dave_standin.INVALID_COMMIT_WELCOME:
                judge.note("invalid_commit_welcome", transition_id=data.get("transition_id"))
            else:
                await socket.close(code=4001, message=b"Unknown opcode")
                break
    finally:
        judge.sockets.discard(socket)
        judge.note("closed", code=socket.close_code)
    return socket


async def report(request):
    return web.json_response(judge.report())


async def close(request):
    code = int(request.query.get("code", "4015"))
    for socket in list(judge.sockets):
        await socket.close(code=code, message=b"closed by the test")
    if code == 4006:
        with judge.lock:
            judge.sessions.clear()
    judge.note("forced_close", code=code)
    return web.json_response({"closed": code})


async def levels(request):
    return web.json_response(judge.levels(float(request.query.get("since", "0"))))


async def reset(request):
    judge.reset()
    return web.json_response({"reset": True})


async def channel(request):
    judge.channels[request.query["server_id"]] = int(request.query["channel_id"])
    return web.json_response({"channel": request.query["channel_id"]})


async def listener(request):
    call = judge.calls.get(request.query["server_id"])
    if call is None:
        return web.json_response({"error": "no DAVE call for that guild"}, status=404)
    call.join_listener(int(request.query["user_id"]))
    return web.json_response({"joined": request.query["user_id"]})


async def main():
    global udp_port
    paths = certificates(args.authority or tempfile.mkdtemp(prefix="tonearm-voice-ca-"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    udp.bind(("127.0.0.1", 0))
    udp_port = udp.getsockname()[1]
    threading.Thread(target=receive, args=(udp,), daemon=True).start()
    voice = web.Application()
    voice.router.add_get("/", voice_socket)
    voice_runner = web.AppRunner(voice)
    await voice_runner.setup()
    voice_site = web.TCPSite(voice_runner, "127.0.0.1", 0, ssl_context=context)
    await voice_site.start()
    control = web.Application()
    control.router.add_get("/report", report)
    control.router.add_get("/levels", levels)
    control.router.add_post("/close", close)
    control.router.add_post("/reset", reset)
    control.router.add_post("/channel", channel)
    control.router.add_post("/listener", listener)
    control_runner = web.AppRunner(control)
    await control_runner.setup()
    control_site = web.TCPSite(control_runner, "127.0.0.1", 0)
    await control_site.start()
    ws_port = voice_site._server.sockets[0].getsockname()[1]
    control_port = control_site._server.sockets[0].getsockname()[1]
    print(json.dumps({"ws_port": ws_port, "udp_port": udp_port, "control_port": control_port, "ca": paths["ca.pem"]}), flush=True)
    await asyncio.Event().wait()


discord.opus._load_default()
asyncio.run(main())
