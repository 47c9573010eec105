"""How the worker, the CLI and the client reach Temporal: the configured server, or the embedded one.

Every client this project builds uses the pydantic data converter, since activity inputs and outputs are pydantic
models. The stock ``temporal`` CLI needs nothing special: a run's input and result are plain JSON.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes

from agent_runner.codec import EncryptionCodec
from agent_runner.contract.errors import ConfigurationError
from agent_runner.temporal_server import EmbeddedTemporal, TemporalServerError, configured_address, connect_client


def data_converter(environ: Mapping[str, str] | None = None) -> DataConverter:
    """The pydantic data converter, encrypting every payload when ``AGENT_RUNNER_ENCRYPTION_KEYS`` is set.

    With encryption on, failures' messages and stack traces are encoded too: a failure can quote what it failed on
    (an API error echoing the request, a tool's exception).
    """
    codec = EncryptionCodec.from_env(environ)
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


async def connect(**kwargs: Any) -> tuple[Client, EmbeddedTemporal | None]:
    """Connect as Temporal's environment configuration says, or to the embedded dev server.

    Returns:
        The client, and the embedded server if this call started one (the caller stops it when done).

    Raises:
        ConfigurationError: The configured address is malformed or unreachable, Temporal's config file cannot be
            read, or the embedded server cannot start; the message says what to fix, in one line.
    """
    try:
        address = configured_address()
    except RuntimeError as e:  # temporalio's ConfigError: a malformed config file or a missing profile
        raise ConfigurationError(f"Cannot read Temporal's client configuration: {_one_line(e)}.") from e
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
        return await connect_client(data_converter=data_converter(), **kwargs)
    except ValueError as e:  # the address does not parse
        raise ConfigurationError(
            f"The Temporal address {where} is malformed ({_reason(e)}): give HOST:PORT, e.g. 127.0.0.1:7233."
        ) from e
    except TemporalServerError as e:
        raise ConfigurationError(
            f"Cannot start the embedded Temporal server: {_one_line(e)}. Or set TEMPORAL_ADDRESS to a running server."
        ) from e
    except RuntimeError as e:  # the bridge's connect error, carrying the transport's own
        raise ConfigurationError(
            f"Cannot reach Temporal at {where}: {_reason(e)}. Start the server there, or point TEMPORAL_ADDRESS at a "
            "running one (unset, the embedded local server is used)."
        ) from e


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _reason(error: BaseException) -> str:
    """The gist of a connect error: the OS's or resolver's own words, not the Rust transport's debug dump."""
    text = str(error)
    found = re.findall(r'(?:message|error): "([^"]+)"', text)
    if found:
        return str(found[-1])
    return _one_line(error).removeprefix("invalid target URL: ")
