"""How the worker, the CLI and the client reach Temporal: the configured server, or the embedded one.

Every client this project builds uses the pydantic data converter, since activity inputs and outputs are pydantic
models. The stock ``temporal`` CLI needs nothing special: a run's input and result are plain JSON.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import temporalio.api.failure.v1
from temporalio.api.common.v1 import Payload
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadConverter,
)
from temporalio.service import RPCError, RPCStatusCode

from agent_runner.codec import ENCODING, KEY_ID_METADATA, KEYS_ENV, EncryptionCodec
from agent_runner.contract.errors import ConfigurationError
from agent_runner.temporal_server import EmbeddedTemporal, TemporalServerError, configured_address, connect_client

_PYDANTIC_JSON = PydanticJSONPlainPayloadConverter()
"""One for the process: it holds no state but its cache of pydantic type adapters, which all payloads share."""


class SharedPydanticPayloadConverter(CompositePayloadConverter):
    """Temporal's ``PydanticPayloadConverter`` (the same payloads, either way), cheap to construct.

    Temporal constructs a payload converter for every workflow activation and every activity (a data converter's
    copy builds one, only to replace it). Temporal's own builds a pydantic serializer and a type-adapter cache each
    time: 24 µs against 4 µs, about four times per iteration of a run. This one shares one of each.
    """

    def __init__(self) -> None:
        super().__init__(
            *(
                _PYDANTIC_JSON if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            ),
            _ENCRYPTED_WITHOUT_KEYS,
        )


class EncryptedWithoutKeys(EncodingPayloadConverter):
    """Refuses an encrypted payload that reached the converter undecrypted: this process has no keys.

    Temporal's own answer is ``KeyError: 'Unknown payload encoding binary/encrypted'``, which says neither what
    happened nor what to set. Last in the converter list, and it converts no value to a payload.
    """

    @property
    def encoding(self) -> str:
        """The encrypted payloads' encoding (``agent_runner.codec.ENCODING``)."""
        return ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:  # noqa: ARG002 (the interface's signature)
        """Nothing: values are encrypted by the codec, after conversion."""
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:  # noqa: ARG002
        """Raise ``ConfigurationError``, saying which key the payload needs and what to set."""
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        raise ConfigurationError(
            f"A payload is encrypted (with key {key_id!r}), and {KEYS_ENV} is not set in this process: set it to "
            "the keys the workers use."
        )


_ENCRYPTED_WITHOUT_KEYS = EncryptedWithoutKeys()


_converting = threading.local()
"""Whether this thread is inside ``BoundedFailureConverter.to_failure`` (which converts causes by calling itself)."""


class BoundedFailureConverter(DefaultFailureConverter):
    """Temporal's failure converter, with failures kept small enough for the server to keep them.

    The server keeps an activity's last failure (what ``status`` shows while it retries) only under a few KB, and
    replaces a bigger one with "Failure exceeds size limit": a failure that chains an HTTP library's exceptions, each
    with its stack trace, is over that. So a failure keeps its message, the innermost frames of its stack trace and
    the first causes of its chain, each cut to a bound, and says where it was cut.
    """

    MESSAGE_LIMIT = 1000
    CAUSE_MESSAGE_LIMIT = 300
    STACK_LIMIT = 800
    CAUSE_STACK_LIMIT = 200
    CAUSE_DEPTH = 2

    def __init__(self, *, encode_common_attributes: bool = False) -> None:
        super().__init__()  # encodes nothing itself: messages and stack traces are bounded first, then encoded
        self._encode = encode_common_attributes

    def to_failure(
        self,
        exception: BaseException,
        payload_converter: PayloadConverter,
        failure: temporalio.api.failure.v1.Failure,
    ) -> None:
        """See ``DefaultFailureConverter.to_failure``; then bound the failure and its causes."""
        if getattr(_converting, "active", False):  # a cause, converted by the call below: bounded with the whole
            super().to_failure(exception, payload_converter, failure)
            return
        _converting.active = True
        try:
            super().to_failure(exception, payload_converter, failure)
        finally:
            _converting.active = False
        cause, depth = failure, 0
        while True:
            top = depth == 0
            message_limit, stack_limit = (
                (self.MESSAGE_LIMIT, self.STACK_LIMIT) if top else (self.CAUSE_MESSAGE_LIMIT, self.CAUSE_STACK_LIMIT)
            )
            cause.message = _cut(cause.message, message_limit, keep="head")
            cause.stack_trace = _cut(cause.stack_trace, stack_limit, keep="tail")
            if not cause.HasField("cause"):
                break
            if depth == self.CAUSE_DEPTH:
                cause.ClearField("cause")
                cause.message += " (its causes are left out)"
                break
            cause, depth = cause.cause, depth + 1
        if self._encode:
            _encode_common_attributes(failure, payload_converter)


class BoundedFailureConverterWithEncodedAttributes(BoundedFailureConverter):
    """``BoundedFailureConverter`` that also moves messages and stack traces into the encoded attributes."""

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)


def _cut(text: str, limit: int, *, keep: str) -> str:
    if len(text) <= limit:
        return text
    if keep == "head":
        return text[:limit] + f"... [{len(text) - limit} more characters]"
    return f"[{len(text) - limit} characters of outer frames left out]\n" + text[-limit:]


def _encode_common_attributes(failure: temporalio.api.failure.v1.Failure, converter: PayloadConverter) -> None:
    """What Temporal's own converter does with ``encode_common_attributes``, for the failure and each cause."""
    while True:
        failure.encoded_attributes.CopyFrom(
            converter.to_payloads([{"message": failure.message, "stack_trace": failure.stack_trace}])[0]
        )
        failure.message, failure.stack_trace = "Encoded failure", ""
        if not failure.HasField("cause"):
            return
        failure = failure.cause


def data_converter(environ: Mapping[str, str] | None = None) -> DataConverter:
    """The pydantic data converter, with bounded failures; every payload encrypted when keys are set.

    Encryption is on when ``AGENT_RUNNER_ENCRYPTION_KEYS`` is set.

    With encryption on, failures' messages and stack traces are encoded too: a failure can quote what it failed on
    (an API error echoing the request, a tool's exception).
    """
    codec = EncryptionCodec.from_env(environ)
    return DataConverter(
        payload_converter_class=SharedPydanticPayloadConverter,
        payload_codec=codec,
        failure_converter_class=(
            BoundedFailureConverter if codec is None else BoundedFailureConverterWithEncodedAttributes
        ),
    )


async def connect(*, embedded: bool = True, **kwargs: Any) -> tuple[Client, EmbeddedTemporal | None]:
    """Connect as Temporal's environment configuration says, or to the embedded dev server.

    Args:
        embedded: With no server configured, use (or start) the local embedded one; ``False`` refuses instead, for a
            caller that decides by what the server knows (``store gc``): an empty new server knows no runs.
        **kwargs: Further ``Client.connect`` keyword arguments.

    Returns:
        The client, and the embedded server if this call started one (the caller stops it when done).

    Raises:
        ConfigurationError: The configured address is malformed or unreachable, Temporal's config file cannot be
            read, the embedded server cannot start, the server has no such namespace, or none is configured and
            ``embedded`` is false; the message says what to fix, in one line.
    """
    try:
        address = configured_address()
    except RuntimeError as e:  # temporalio's ConfigError: a malformed config file or a missing profile
        raise ConfigurationError(f"Cannot read Temporal's client configuration: {_one_line(e)}.") from e
    if address is None and not embedded:
        raise ConfigurationError(
            "No Temporal server is configured, and this command does not use the embedded one (it would know none "
            "of the runs): set TEMPORAL_ADDRESS (and TEMPORAL_NAMESPACE) to the server the workers use."
        )
    if address is None:
        where = "the local embedded server"
    else:
        where = (
            f"{address!r} (from {'TEMPORAL_ADDRESS' if os.environ.get('TEMPORAL_ADDRESS') else 'the config profile'})"
        )
    # temporalio only warns about a scheme today, and then fails to resolve "http" as a host.
    if address is not None and "://" in address:
        raise ConfigurationError(
            f"The Temporal address {where} must be HOST:PORT without a scheme, e.g. 127.0.0.1:7233."
        )
    try:
        client, server = await connect_client(data_converter=data_converter(), **kwargs)
    except ValueError as e:  # the address does not parse
        raise ConfigurationError(
            f"The Temporal address {where} is malformed ({_reason(e)}): give HOST:PORT, e.g. 127.0.0.1:7233."
        ) from e
    except TemporalServerError as e:
        raise ConfigurationError(
            f"Cannot start the embedded Temporal server: {_one_line(e)}. Or set TEMPORAL_ADDRESS to a running server."
        ) from e
    except OSError as e:
        if address is None or e.filename is None:
            raise
        # temporalio reads the TLS files the configuration names only now, and lets the OSError through.
        raise ConfigurationError(
            f"Cannot read {e.filename}, which Temporal's client configuration names ({e.strerror}): fix the path in "
            "TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH or the "
            "config profile."
        ) from e
    except RuntimeError as e:  # the bridge's connect error, carrying the transport's own
        raise ConfigurationError(
            f"Cannot reach Temporal at {where}: {_reason(e)}. Start the server there, or point TEMPORAL_ADDRESS at a "
            "running one (unset, the embedded local server is used)."
        ) from e
    try:
        await _check_namespace(client)
    except ConfigurationError:
        if server is not None:
            server.stop()
        raise
    return client, server


_NAMESPACE_CHECK = timedelta(seconds=10)


async def _check_namespace(client: Client) -> None:
    """Refuse a namespace the server does not have, which Temporal would otherwise report as each run missing.

    Raises:
        ConfigurationError: The server has no such namespace.
    """
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace), timeout=_NAMESPACE_CHECK
        )
    except RPCError as e:
        # Only an answer that the namespace is missing (or unnamed) counts: credentials that may not describe it, or a
        # server slow to answer, say nothing of it, and what the caller does next reports its own failure.
        if e.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT) and "amespace" in e.message:
            raise no_namespace(client) from e


def no_namespace(client: Client) -> ConfigurationError:
    """The error for a client whose namespace the server does not have."""
    return ConfigurationError(
        f"Temporal at {client.service_client.config.target_host} has no namespace {client.namespace!r}: set "
        "TEMPORAL_NAMESPACE to the namespace the workers use (`temporal operator namespace list` lists them)."
    )


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _reason(error: BaseException) -> str:
    """The gist of a connect error: the OS's or resolver's own words, not the Rust transport's debug dump."""
    text = str(error)
    found = re.findall(r'(?:message|error): "([^"]+)"', text)
    if found:
        return str(found[-1])
    return _one_line(error).removeprefix("invalid target URL: ")
