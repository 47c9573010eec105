"""How the worker, the CLI and the client reach Temporal: the configured server, or the embedded one.

Every client this project builds uses the pydantic data converter, since activity inputs and outputs are pydantic
models. The stock ``temporal`` CLI needs nothing special: a run's input and result are plain JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes

from agent_runner.codec import EncryptionCodec
from agent_runner.temporal_server import EmbeddedTemporal, connect_client


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
    """
    return await connect_client(data_converter=data_converter(), **kwargs)
