#!/usr/bin/env python3
"""Opens voice packets as Discord's voice server does, with libraries other than the sender's:
libsodium (PyNaCl) for aead_xchacha20_poly1305_rtpsize, OpenSSL (cryptography) for
aead_aes256_gcm_rtpsize. Reads a JSON file {mode, key, packets: [{packet, payload}]} (hex);
exits 1 naming the first packet whose header, counter or payload is not what it should be."""
import json, struct, sys

import nacl.bindings
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

spec = json.load(open(sys.argv[1]))
key = bytes.fromhex(spec["key"])
for index, item in enumerate(spec["packets"]):
    packet, payload = bytes.fromhex(item["packet"]), bytes.fromhex(item["payload"])
    header, sealed, counter = packet[:12], packet[12:-4], packet[-4:]
    if header[0] != 0x80 or header[1] != 0x78:
        sys.exit(f"packet {index}: RTP header {header[:2].hex()}, not 8078")
    try:
        if spec["mode"] == "aead_xchacha20_poly1305_rtpsize":
            opened = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(sealed, header, counter + bytes(20), key)
        else:
            opened = AESGCM(key).decrypt(counter + bytes(8), sealed, header)
    except Exception as error:  # a wrong tag, key or nonce
        sys.exit(f"packet {index} (counter {struct.unpack('>I', counter)[0]}) does not open: {error!r}")
    if opened != payload:
        sys.exit(f"packet {index}: opened to {opened.hex()}, sent {payload.hex()}")
print(f"{len(spec['packets'])} packets opened")
