"""Set-up shared by the encrypted store's tests (test_store_crypto, test_store_reseal, test_store_gc): keys, a fresh
store to point them at, and a worker that uses it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.codec import KEYS_ENV, new_key
from agent_runner.store import ContentStore
from agent_runner.testing import FakeMessagesAPI
from agent_runner.worker import build_worker
from tests.conftest import anthropic_client_factory
from tests.tools_for_tests import get_weather

K1, K2, K3 = new_key(), new_key(), new_key()


def keys(value: str) -> dict[str, str]:
    """The environment that sets ``AGENT_RUNNER_ENCRYPTION_KEYS`` to ``value`` (``"id:key,..."``, current first)."""
    return {KEYS_ENV: value}


def fresh_database(server_url: str, prefix: str) -> Iterator[str]:
    """A database of its own on the PostgreSQL server at ``server_url``, dropped when the iterator ends."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield server_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def empty_store_url(request: pytest.FixtureRequest, tmp_path: Path, prefix: str) -> Iterator[str]:
    """For a fixture parametrized ``["sqlite", "postgresql"]``: an empty store's URL, a SQLite file or a database
    of its own (named from ``prefix``) on the session's PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite://{tmp_path}/store.db"
        return
    yield from fresh_database(request.getfixturevalue("postgres_url"), prefix)


def worker_with_store(client: Client, fake: FakeMessagesAPI, queue: str, store: ContentStore) -> Worker:
    """A worker whose Claude is the fake API and whose store is ``store``, with ``get_weather``."""
    return build_worker(
        client,
        registry=ToolRegistry([get_weather]),
        task_queue=queue,
        claude=ClaudeActivities(anthropic_client_factory(fake)),
        store=store,
    )
