"""Encryption of everything a run sends through Temporal: conversation content stays unreadable in history and UI.

Every payload (run input, messages, tool results, update arguments, query answers) is encrypted with AES-GCM before
it leaves the process, so Temporal's server, its database and its web UI see only ciphertext. Keys come from the
environment, never from the code or the run::

    AGENT_RUNNER_ENCRYPTION_KEYS="2026-11:<base64 key>,2026-05:<base64 older key>"

The first key encrypts; every listed key decrypts, so rotating is: put a new key first, keep the old ones until no
open run needs them. Each payload names the key that encrypted it. Generate a key with
``python -m agent_runner.codec new-key``. Workers, the CLI and every client of the runs need the same variable. The
content store reads the same keys (``keys_from_env``) and encrypts what it holds too (``agent_runner/store.py``).

``python -m agent_runner.codec serve --port 8081`` runs a codec server, so the Temporal UI can show decrypted
payloads to the people allowed to reach it (point the UI's "codec endpoint" at it).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from agent_runner.contract.errors import ConfigurationError

KEYS_ENV = "AGENT_RUNNER_ENCRYPTION_KEYS"
TOKEN_ENV = "AGENT_RUNNER_CODEC_TOKEN"
"""The secret a codec server's callers must show."""
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
_NONCE_BYTES = 12


logger = logging.getLogger(__name__)

PLAINTEXT_WARNING = (
    f"A payload reached this process unencrypted though {KEYS_ENV} is set: a client without the keys wrote it (a "
    "run's input, an edit), or a run started before encryption was on, and Temporal holds it in plaintext. Give every "
    f"client the keys ({KEYS_ENV}). This is said once per process."
)
"""What a process that encrypts logs, once, when it reads a payload no one encrypted: it goes on with it (a run
started before encryption was turned on must go on), but the history holds that payload in plaintext."""


class EncryptionCodec(PayloadCodec):
    """AES-GCM encryption of payloads, with key rotation.

    Args:
        keys: Key id to 16, 24 or 32 raw key bytes. The first one encrypts; all of them decrypt.
    """

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise ConfigurationError(f"An encryption codec needs at least one key; set {KEYS_ENV}.")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._current = next(iter(keys))
        self._told_plaintext = False
        self.warn_plaintext = True
        """Whether to log ``PLAINTEXT_WARNING`` once; off for a reader of every history (``store gc``), to whom runs
        from before encryption was on are no news."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EncryptionCodec | None:
        """The codec ``AGENT_RUNNER_ENCRYPTION_KEYS`` describes, or ``None`` when it is not set."""
        keys = keys_from_env(environ)
        return None if keys is None else cls(keys)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt each payload whole (data and metadata) under the current key."""
        cipher = self._ciphers[self._current]
        encoded = []
        for payload in payloads:
            nonce = os.urandom(_NONCE_BYTES)
            encoded.append(
                Payload(
                    metadata={"encoding": ENCODING, KEY_ID_METADATA: self._current.encode()},
                    data=nonce + cipher.encrypt(nonce, payload.SerializeToString(), None),
                )
            )
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt encrypted payloads; others pass through (such as a run started before encryption was on)."""
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                if self.warn_plaintext and not self._told_plaintext:
                    self._told_plaintext = True
                    logger.warning(PLAINTEXT_WARNING)
                decoded.append(payload)
                continue
            key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode()
            cipher = self._ciphers.get(key_id)
            if cipher is None:
                raise ConfigurationError(
                    f"A payload was encrypted with key {key_id!r}, which {KEYS_ENV} does not hold. Add that key "
                    "back (after the current one) until no run needs it."
                )
            data = payload.data
            try:
                decoded.append(Payload.FromString(cipher.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], None)))
            except (InvalidTag, ValueError):  # ValueError: too short to hold a nonce
                raise ConfigurationError(
                    f"A payload encrypted with key {key_id!r} does not decrypt with the key {KEYS_ENV} holds under "
                    f"that id (another key with the same id, or a payload that was changed): set {KEYS_ENV} to the "
                    "keys the workers use."
                ) from None  # the cipher's InvalidTag says nothing more
        return decoded


def keys_from_env(environ: Mapping[str, str] | None = None) -> dict[str, bytes] | None:
    """The keys ``AGENT_RUNNER_ENCRYPTION_KEYS`` lists, current first, or ``None`` when it is not set.

    The payload codec and the content store (``agent_runner/store.py``) both read them, so one variable turns
    encryption on everywhere, with one rotation.

    Raises:
        ConfigurationError: An entry is not ``id:base64key`` with a 16-, 24- or 32-byte key.
    """
    value = (os.environ if environ is None else environ).get(KEYS_ENV, "").strip()
    if not value:
        return None
    keys: dict[str, bytes] = {}
    for entry in value.split(","):
        key_id, _, encoded = entry.strip().partition(":")
        try:
            key = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            key = b""
        if not key_id or len(key) not in (16, 24, 32):
            raise ConfigurationError(
                f"{KEYS_ENV} must be `id:base64key,...` with 16-, 24- or 32-byte keys; the entry for "
                f"{key_id or '(no id)'!r} is not. Make one with `python -m agent_runner.codec new-key`."
            )
        if key_id in keys:  # else the later key would win silently, and what the earlier one sealed would not open
            raise ConfigurationError(
                f"{KEYS_ENV} lists the key id {key_id!r} twice: give each key an id of its own (the first key "
                "encrypts; every payload names the id of the key that encrypted it)."
            )
        keys[key_id] = key
    return keys


def new_key() -> str:
    """A fresh random 256-bit key, base64-encoded, as ``AGENT_RUNNER_ENCRYPTION_KEYS`` takes it."""
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()


async def serve(codec: EncryptionCodec, port: int, allowed_origin: str, token: str) -> None:
    """Serve Temporal's codec-server protocol (``POST /encode``, ``POST /decode``) for the web UI.

    Anyone who can reach it can decrypt, so every request needs the token, either as ``Authorization: Bearer
    <token>`` or as the first part of the path (``http://127.0.0.1:8081/<token>``, the codec endpoint to give the
    UI when it sends no credentials of ours), and a browser request must come from ``allowed_origin``.
    """
    import hmac

    from aiohttp import web
    from google.protobuf import json_format
    from temporalio.api.common.v1 import Payloads

    def authorized(request: web.Request) -> bool:
        given = request.match_info.get("token") or request.headers.get("authorization", "").removeprefix("Bearer ")
        return hmac.compare_digest(given.encode(), token.encode())

    def cors(response: web.StreamResponse) -> web.StreamResponse:
        response.headers["Access-Control-Allow-Origin"] = allowed_origin
        response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = "content-type, x-namespace, authorization"
        response.headers["Access-Control-Allow-Credentials"] = "true"
        return response

    def handler(decode: bool) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            origin = request.headers.get("origin")
            if origin is not None and origin != allowed_origin:
                return web.Response(status=403, text=f"origin {origin} is not allowed; start with --origin {origin}")
            if request.method == "OPTIONS":
                return cors(web.Response())
            if not authorized(request):
                return cors(web.Response(status=401, text="a token is needed (Authorization: Bearer, or in the path)"))
            try:
                payloads = json_format.Parse(await request.read(), Payloads())
            except (json_format.ParseError, UnicodeDecodeError) as e:
                return cors(web.Response(status=400, text=f'the body must be JSON such as {{"payloads": [...]}}: {e}'))
            try:
                result = await (codec.decode if decode else codec.encode)(payloads.payloads)
            except ConfigurationError as e:  # a payload that does not decrypt: the UI shows the reason
                return cors(web.Response(status=400, text=str(e)))
            body = json_format.MessageToJson(Payloads(payloads=result))
            return cors(web.Response(text=body, content_type="application/json"))

        return handle

    app = web.Application()
    for path, decode in (("/decode", True), ("/encode", False)):
        for route in (path, "/{token}" + path):
            app.router.add_route("POST", route, handler(decode))
            app.router.add_route("OPTIONS", route, handler(decode))
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    sys.stdout.write(f"READY http://127.0.0.1:{port}\n")
    sys.stdout.flush()
    await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_runner.codec new-key | serve [--port N] [--origin URL]``."""
    parser = argparse.ArgumentParser(description="Payload encryption for agent runs.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("new-key", help="print a new random key")
    server = commands.add_parser("serve", help="run a codec server for the Temporal UI")
    server.add_argument("--port", type=int, default=8081)
    server.add_argument("--origin", default="http://localhost:8233", help="the Temporal UI's origin (CORS)")
    args = parser.parse_args(argv)
    if args.command == "new-key":
        sys.stdout.write(new_key() + "\n")
        return 0
    codec = EncryptionCodec.from_env()
    if codec is None:
        sys.stderr.write(f"error: set {KEYS_ENV} to the keys the workers use.\n")
        return 1
    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        sys.stderr.write(
            f"error: set {TOKEN_ENV} to a secret of 16 characters or more (python -m agent_runner.codec new-key "
            "makes one): anyone who can reach the codec server could decrypt your runs otherwise.\n"
        )
        return 1
    try:
        asyncio.run(serve(codec, args.port, args.origin, token))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
