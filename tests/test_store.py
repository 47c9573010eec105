"""The content store (agent_runner/store.py) on each backend: a SQLite file, this process's memory, and a real
PostgreSQL server (the session's throwaway cluster, tests/postgres_server.py)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio

from agent_runner.store import (
    GET_CHUNK,
    STORE_ENV,
    BlobCorrupted,
    BlobMissing,
    ChainNode,
    ContentStore,
    StoreError,
    StoreStats,
    _SqliteStore,  # the busy timeout is no public setting
    default_store_path,
    open_store,
    redact_store_url,
    ref_for,
)

ROOT = Path(__file__).resolve().parent.parent


def head_for(parent: str | None, message: str) -> str:
    """A chain head as a caller would compute it: the hash of the parent's head and the message's ref."""
    return ref_for(f"{parent}|{message}".encode())


def linear_chain(messages: list[str], parent: str | None = None) -> list[ChainNode]:
    nodes = []
    for message in messages:
        node = ChainNode(head=head_for(parent, message), parent=parent, message=message)
        nodes.append(node)
        parent = node.head
    return nodes


def blob(text: str) -> tuple[str, bytes]:
    data = text.encode()
    return ref_for(data), data


@pytest_asyncio.fixture(params=["sqlite", "memory", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ContentStore]:
    """An empty store of each kind."""
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path}/store.db"
    elif request.param == "memory":
        url = "memory:"
    else:
        url = request.getfixturevalue("postgres_url")
        # One database for the session, emptied for each test (the tables exist after the first open_store).
        opened = open_store(url)
        await opened.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE blobs, nodes")
    opened = open_store(url)
    yield opened
    await opened.close()


# ------------------------------------------------------------------------------------------------------- blobs


def test_ref_for_is_sha256_of_the_bytes() -> None:
    assert ref_for(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert ref_for(b"abc") == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


async def test_put_then_get_returns_the_exact_bytes(store: ContentStore) -> None:
    contents = [b"", bytes(range(256)), "héllo, мир, 世界 \x00".encode(), b'{"role":"user","content":"hi"}']
    blobs = {ref_for(data): data for data in contents}

    assert await store.put(blobs) == sum(map(len, contents))

    refs = [ref_for(contents[2]), ref_for(contents[0]), ref_for(contents[2]), ref_for(contents[1])]
    got = await store.get(refs)
    assert got == {ref_for(data): data for data in (contents[2], contents[0], contents[1])}
    assert list(got) == [ref_for(contents[2]), ref_for(contents[0]), ref_for(contents[1])]
    assert all(type(value) is bytes for value in got.values())
    assert await store.get([]) == {}


async def test_put_again_writes_nothing_and_returns_0(store: ContentStore) -> None:
    a, b, c = blob("a" * 10), blob("b" * 20), blob("c" * 30)

    assert await store.put(dict([a, b])) == 30
    assert await store.put(dict([a, b])) == 0
    assert await store.put(dict([a, b, c])) == 30  # only c is new
    assert await store.put({}) == 0
    assert await store.stats() == StoreStats(blobs=3, blob_bytes=60, nodes=0)


async def test_a_key_that_is_not_the_ref_of_its_blob_is_refused_and_nothing_is_written(store: ContentStore) -> None:
    good_ref, good = blob("good")
    wrong_ref = ref_for(b"something else")

    with pytest.raises(StoreError) as raised:
        await store.put({good_ref: good, wrong_ref: b"not that"})

    assert type(raised.value) is StoreError
    assert str(raised.value) == (
        f"refused to write to the store at {store.url}: 1 key(s) are not the reference of their blob: "
        f"{wrong_ref!r} (its content is {ref_for(b'not that')}). Key each blob by agent_runner.store.ref_for(blob)."
    )
    assert await store.stats() == StoreStats(blobs=0, blob_bytes=0, nodes=0)


async def test_blob_missing_names_exactly_the_missing_refs_and_the_store(store: ContentStore) -> None:
    present_ref, present = blob("present")
    await store.put({present_ref: present})
    gone_1, gone_2 = ref_for(b"gone 1"), ref_for(b"gone 2")

    with pytest.raises(BlobMissing) as raised:
        await store.get([gone_2, present_ref, gone_1, gone_2])

    assert raised.value.refs == (gone_2, gone_1)
    assert raised.value.url == store.url
    assert str(raised.value) == (
        f"the store at {store.url} has no blob {gone_2}, {gone_1}: it was deleted, or stored in another store. The "
        "worker and the client must use the same AGENT_RUNNER_STORE; a run that needs this content cannot go on, so "
        "start it again (or fork it from an earlier turn)"
    )


async def overwrite(store: ContentStore, ref: str, data: bytes) -> None:
    """Change a stored blob's bytes behind the store's back, as a disk fault or a stray UPDATE would."""
    if store.url == "memory:":
        store._blobs[ref] = data  # type: ignore[attr-defined]
    elif store.url.startswith("sqlite:"):
        with sqlite3.connect(store.path) as conn:  # type: ignore[attr-defined]
            assert conn.execute("UPDATE blobs SET data = ? WHERE ref = ?", (data, ref)).rowcount == 1
    else:
        with psycopg.connect(store._conninfo, autocommit=True) as conn:  # type: ignore[attr-defined]
            assert conn.execute("UPDATE blobs SET data = %s WHERE ref = %s", (data, ref)).rowcount == 1


async def test_a_blob_whose_bytes_changed_is_refused_on_read_naming_it(store: ContentStore) -> None:
    """Every read is checked against the ref: changed bytes raise BlobCorrupted, and no blob of the read is returned."""
    good_ref, good = blob('"intact"')
    bad_ref, bad = blob('"stored"')
    await store.put({good_ref: good, bad_ref: bad})
    await overwrite(store, bad_ref, b'"tampered"')

    with pytest.raises(BlobCorrupted) as raised:
        await store.get([good_ref, bad_ref, bad_ref])

    assert raised.value.refs == (bad_ref,)
    assert raised.value.url == store.url
    assert str(raised.value) == (
        f"the store at {store.url} holds corrupted content under {bad_ref}: the bytes no longer hash to their "
        "reference, so they were not used. Restore the blobs from a backup, or delete them so that the content can "
        "be stored again; a run that needs this content cannot go on, so start it again (or fork it from an earlier "
        "turn)"
    )
    assert await store.get([good_ref]) == {good_ref: good}


async def test_a_missing_blob_is_reported_before_a_corrupted_one(store: ContentStore) -> None:
    bad_ref, bad = blob('"stored"')
    await store.put({bad_ref: bad})
    await overwrite(store, bad_ref, b'"tampered"')
    gone = ref_for(b"gone")

    with pytest.raises(BlobMissing) as raised:
        await store.get([bad_ref, gone])

    assert raised.value.refs == (gone,)


async def test_a_12_mb_blob_round_trips(store: ContentStore) -> None:
    # Not one repeated byte: a pattern that would show a shifted or truncated copy.
    data = bytes(range(256)) * (12 * 1024 * 1024 // 256) + b"tail"
    ref = ref_for(data)

    assert await store.put({ref: data}) == len(data)
    got = await store.get([ref])

    assert got[ref] == data
    assert await store.stats() == StoreStats(blobs=1, blob_bytes=12 * 1024 * 1024 + 4, nodes=0)


async def test_get_of_more_refs_than_one_query_holds(store: ContentStore) -> None:
    blobs = dict(blob(f"message {i}") for i in range(GET_CHUNK * 2 + 7))
    assert await store.put(blobs) == sum(map(len, blobs.values()))

    assert await store.get(list(blobs)) == blobs

    missing = ref_for(b"not there")
    with pytest.raises(BlobMissing) as raised:
        await store.get([*blobs, missing])
    assert raised.value.refs == (missing,)


# ------------------------------------------------------------------------------------------------------ chains


async def test_a_chain_of_2000_nodes_resolves_root_first_in_one_query(store: ContentStore) -> None:
    messages = [ref_for(f"message {i}".encode()) for i in range(2000)]
    nodes = linear_chain(messages)
    await store.put_nodes(nodes)

    statements: list[str] = []
    if store.url.startswith("sqlite:"):
        store._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    started = time.perf_counter()
    got = await store.chain(nodes[-1].head)
    elapsed = time.perf_counter() - started

    assert got == messages
    assert await store.chain(nodes[999].head) == messages[:1000]
    assert await store.chain(nodes[0].head) == messages[:1]
    if store.url.startswith("sqlite:"):
        assert len(statements) == 3  # one statement per chain() call
        assert all(statement.lstrip().startswith("WITH RECURSIVE") for statement in statements)
    assert elapsed < 1.0


async def test_two_children_of_one_parent_each_resolve_to_their_own_branch(store: ContentStore) -> None:
    trunk = linear_chain(["m1", "m2", "m3"])
    left = linear_chain(["left-1", "left-2"], parent=trunk[-1].head)
    right = linear_chain(["right-1"], parent=trunk[-1].head)
    # Out of order, and in two calls: a node may arrive before its parent.
    await store.put_nodes([*right, *left])
    await store.put_nodes(trunk)

    assert await store.chain(left[-1].head) == ["m1", "m2", "m3", "left-1", "left-2"]
    assert await store.chain(right[-1].head) == ["m1", "m2", "m3", "right-1"]
    assert await store.chain(trunk[-1].head) == ["m1", "m2", "m3"]
    assert await store.chain(left[0].head) == ["m1", "m2", "m3", "left-1"]


async def test_put_nodes_again_keeps_the_first_node_of_a_head(store: ContentStore) -> None:
    nodes = linear_chain(["m1", "m2"])
    await store.put_nodes(nodes)
    await store.put_nodes(nodes)
    await store.put_nodes([ChainNode(head=nodes[1].head, parent=None, message="other")])
    await store.put_nodes([])

    assert await store.chain(nodes[1].head) == ["m1", "m2"]
    assert await store.stats() == StoreStats(blobs=0, blob_bytes=0, nodes=2)


async def test_chain_of_an_unknown_head_raises_blob_missing(store: ContentStore) -> None:
    head = head_for(None, "never stored")

    with pytest.raises(BlobMissing) as raised:
        await store.chain(head)

    assert raised.value.refs == (head,)
    assert str(raised.value) == (
        f"the store at {store.url} has no chain node {head}; the worker and the client must use the same "
        "AGENT_RUNNER_STORE"
    )


async def test_chain_with_a_missing_ancestor_names_that_ancestor(store: ContentStore) -> None:
    nodes = linear_chain(["m1", "m2", "m3", "m4"])
    await store.put_nodes([nodes[0], nodes[2], nodes[3]])  # m2's node is missing

    with pytest.raises(BlobMissing) as raised:
        await store.chain(nodes[3].head)

    assert raised.value.refs == (nodes[1].head,)
    assert str(raised.value) == (
        f"the store at {store.url} has no chain node {nodes[1].head}, an ancestor of the chain node "
        f"{nodes[3].head}; the worker and the client must use the same AGENT_RUNNER_STORE"
    )
    assert await store.chain(nodes[0].head) == ["m1"]


async def test_stats_count_blobs_bytes_and_nodes_exactly(store: ContentStore) -> None:
    assert await store.stats() == StoreStats(blobs=0, blob_bytes=0, nodes=0)
    await store.put(dict([blob("x" * 100), blob("y" * 250), blob("")]))
    await store.put_nodes(linear_chain(["a", "b", "c", "d", "e"]))

    assert await store.stats() == StoreStats(blobs=3, blob_bytes=350, nodes=5)


# ------------------------------------------------------------------------------------------------------ commit


async def test_commit_stores_blobs_nodes_and_live_events_together(store: ContentStore) -> None:
    """What a model call writes at its end, in one call: the reply, the transcripts it extends, its live events."""
    a, b = blob("question"), blob("answer")
    nodes = linear_chain([a[0], b[0]])
    run = f"run-{uuid.uuid4()}"  # the session's PostgreSQL live log is shared by the tests

    assert await store.commit(dict([a, b]), nodes, (run, [b'{"type":"text"}', b'{"type":"block_stop"}'])) == 14
    assert await store.commit(dict([a, b]), nodes, (run, [])) == 0  # again: nothing new, no live events

    assert await store.get([a[0], b[0]]) == dict([a, b])
    assert await store.chain(nodes[-1].head) == [a[0], b[0]]
    live = await store.read_live(run)
    assert [entry for _, entry in live] == [b'{"type":"text"}', b'{"type":"block_stop"}']
    assert await store.stats() == StoreStats(blobs=2, blob_bytes=14, nodes=2)


async def test_commit_refuses_a_wrong_key_and_writes_nothing(store: ContentStore) -> None:
    good_ref, good = blob("good")
    wrong_ref = ref_for(b"something else")
    run = f"run-{uuid.uuid4()}"

    with pytest.raises(StoreError):
        await store.commit({good_ref: good, wrong_ref: b"not that"}, linear_chain([good_ref]), (run, [b"{}"]))

    assert await store.stats() == StoreStats(blobs=0, blob_bytes=0, nodes=0)
    assert await store.read_live(run) == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_commit_is_one_transaction(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """When its last part fails, none of it is stored: blobs and nodes are never half written."""
    if backend == "sqlite":
        url = f"sqlite://{tmp_path}/store.db"
    else:
        name = f"commit_{os.getpid()}_{time.monotonic_ns()}"
        server = request.getfixturevalue("postgres_url")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = server.rsplit("/", 1)[0] + "/" + name
    store = open_store(url)
    try:
        await store.stats()  # the schema exists
        # The live log gone: the commit's last statement fails.
        if backend == "sqlite":
            with sqlite3.connect(tmp_path / "store.db") as conn:
                conn.execute("ALTER TABLE live RENAME TO live_gone")
        else:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ALTER TABLE live RENAME TO live_gone")
        a = blob("question")

        with pytest.raises(StoreError):
            await store.commit(dict([a]), linear_chain([a[0]]), ("run-1", [b"{}"]))

        assert await store.stats() == StoreStats(blobs=0, blob_bytes=0, nodes=0)
    finally:
        await store.close()
        if backend == "postgresql":
            with psycopg.connect(request.getfixturevalue("postgres_url"), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


# ------------------------------------------------------------------------------------------ SQLite, several processes

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from agent_runner.store import ChainNode, open_store, ref_for

    async def main(url, name, other):
        store = open_store(url)
        parent = None
        for i in range(50):
            data = f"{name} {i}".encode() * 100
            assert await store.put({ref_for(data): data}) == len(data)
            head = ref_for(f"{parent}|{ref_for(data)}".encode())
            await store.put_nodes([ChainNode(head=head, parent=parent, message=ref_for(data))])
            parent = head
        # Wait until the other process's last blob is readable here, then read all of its blobs.
        last = f"{other} 49".encode() * 100
        for _ in range(600):
            try:
                await store.get([ref_for(last)])
                break
            except Exception:
                await asyncio.sleep(0.05)
        got = await store.get([ref_for(f"{other} {i}".encode() * 100) for i in range(50)])
        assert len(got) == 50
        await store.close()
        print(parent)

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_two_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/shared.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, name, other],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, other in (("alpha", "beta"), ("beta", "alpha"))
    ]
    heads = []
    for writer in writers:
        out, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err
        heads.append(out.strip())

    async with open_store(url) as store:
        assert await store.stats() == StoreStats(
            blobs=100,
            blob_bytes=sum(len(f"{name} {i}".encode() * 100) for name in ("alpha", "beta") for i in range(50)),
            nodes=100,
        )
        for name, head in zip(("alpha", "beta"), heads, strict=True):
            assert await store.chain(head) == [ref_for(f"{name} {i}".encode() * 100) for i in range(50)]


def hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another process's connection in the middle of a write on a file not yet in WAL mode (what an opener meets)."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE theirs (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO theirs VALUES (1)")
    return holder


async def test_a_sqlite_store_opened_while_another_opener_writes_the_file_waits_for_it(tmp_path: Path) -> None:
    # SQLite fails the switch to WAL at once, busy timeout or not, while another connection holds the write lock:
    # workers started together on a new store file met it as "cannot set up the store ... database is locked".
    holder = hold_write_lock(tmp_path / "shared.db")
    release = threading.Timer(0.5, holder.execute, ("COMMIT",))
    release.start()
    started = time.monotonic()
    try:
        async with open_store(f"sqlite://{tmp_path}/shared.db") as store:
            waited = time.monotonic() - started
            ref, data = blob("after the other opener")
            assert await store.put({ref: data}) == len(data)
            assert await store.get([ref]) == {ref: data}
    finally:
        release.join()
    assert 0.45 <= waited < 5
    holder.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "shared.db")) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT x FROM theirs").fetchall() == [(1,)]


def test_a_sqlite_store_whose_file_stays_locked_fails_after_its_busy_timeout_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    holder = hold_write_lock(path)
    started = time.monotonic()
    try:
        with pytest.raises(StoreError) as raised:
            _SqliteStore(path, f"sqlite://{path}", busy_timeout_ms=300)
        waited = time.monotonic() - started
    finally:
        holder.close()
    assert str(raised.value) == f"cannot set up the store at sqlite://{path}: database is locked"
    assert 0.2 <= waited < 3


async def test_two_stores_in_one_process_share_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/shared.db"
    async with open_store(url) as first, open_store(url) as second:
        ref, data = blob("written by the first")
        assert await first.put({ref: data}) == len(data)
        assert await second.put({ref: data}) == 0
        assert await second.get([ref]) == {ref: data}
        nodes = linear_chain(["m1", "m2"])
        await second.put_nodes(nodes)
        assert await first.chain(nodes[-1].head) == ["m1", "m2"]


# ------------------------------------------------------------------------------------------------- open_store


async def test_open_store_reads_sqlite_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = open_store(f"sqlite://{tmp_path}/abs.db")
    assert absolute.url == f"sqlite://{tmp_path}/abs.db"
    await absolute.close()
    assert (tmp_path / "abs.db").is_file()

    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:rel.db")
    assert relative.url == "sqlite:rel.db"
    await relative.close()
    assert (tmp_path / "rel.db").is_file()


def test_open_store_refuses_an_unknown_scheme() -> None:
    with pytest.raises(StoreError) as raised:
        open_store("redis://127.0.0.1:6379/0")
    assert str(raised.value) == (
        "unknown store URL 'redis://127.0.0.1:6379/0': use sqlite:///absolute/path.db, sqlite:relative/path.db, "
        "postgresql://user:password@host:port/database (or postgres://...), or memory: (this process only). "
        "Set it with AGENT_RUNNER_STORE."
    )


def test_open_store_refuses_a_sqlite_url_with_a_host() -> None:
    with pytest.raises(StoreError) as raised:
        open_store("sqlite://store.db")
    assert str(raised.value) == (
        "'sqlite://store.db' is not a SQLite store URL: write sqlite:///absolute/path.db (three slashes) or "
        "sqlite:relative/path.db"
    )


def test_open_store_says_when_the_sqlite_directory_is_missing(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as raised:
        open_store(f"sqlite://{tmp_path}/no/such/dir/store.db")
    assert str(raised.value) == (
        f"cannot open the store at sqlite://{tmp_path}/no/such/dir/store.db: unable to open database file. Check "
        f"that the directory {tmp_path}/no/such/dir exists and is writable, or point AGENT_RUNNER_STORE elsewhere."
    )


async def test_open_store_reads_the_environment_then_the_default_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORE_ENV, f"sqlite://{tmp_path}/from-env.db")
    from_env = open_store()
    assert from_env.url == f"sqlite://{tmp_path}/from-env.db"
    await from_env.close()

    monkeypatch.setenv(STORE_ENV, "")  # empty counts as unset
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "agent-runner" / "store.db"
    default = open_store()
    assert default.url == f"sqlite://{tmp_path}/xdg/agent-runner/store.db"
    await default.close()
    assert (tmp_path / "xdg" / "agent-runner" / "store.db").is_file()

    monkeypatch.delenv(STORE_ENV)
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "agent-runner" / "store.db"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "agent-runner" / "store.db"


async def test_memory_stores_are_separate() -> None:
    async with open_store("memory:") as first, open_store("memory:") as second:
        ref, data = blob("only in the first")
        await first.put({ref: data})
        assert first.url == second.url == "memory:"
        with pytest.raises(BlobMissing):
            await second.get([ref])


async def test_open_store_takes_postgres_urls_and_hides_the_password(postgres_url: str) -> None:
    alias = "postgres://" + postgres_url.removeprefix("postgresql://")
    async with open_store(alias) as store:
        assert store.url == alias
        ref, data = blob("via postgres://")
        await store.put({ref: data})
        assert await store.get([ref]) == {ref: data}

    with pytest.raises(StoreError) as raised:
        open_store("postgresql://someone:s3cret@127.0.0.1:1/nothing")
    assert "s3cret" not in str(raised.value)
    assert str(raised.value).startswith("cannot set up the store at postgresql://someone:***@127.0.0.1:1/nothing: ")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("postgresql://agent:hunter2@db:5432/runs", "postgresql://agent:***@db:5432/runs", id="userinfo"),
        pytest.param(
            "postgresql://agent@db:5432/runs?password=hunter2",
            "postgresql://agent@db:5432/runs?password=***",
            id="query",
        ),
        pytest.param(
            "postgres://agent@db/runs?sslmode=require&sslpassword=k%20ey&password=hunter2&application_name=w",
            "postgres://agent@db/runs?sslmode=require&sslpassword=***&password=***&application_name=w",
            id="query-sslpassword",
        ),
        pytest.param(
            "host=db user=agent password=hunter2 dbname=runs",
            "host=db user=agent password=*** dbname=runs",
            id="keywords",
        ),
        pytest.param(
            "host=db password = 'hun ter\\'2' sslpassword=x dbname=runs",
            "host=db password = *** sslpassword=*** dbname=runs",
            id="keywords-quoted",
        ),
        pytest.param("postgresql://agent@db:5432/runs", "postgresql://agent@db:5432/runs", id="no-password"),
        pytest.param("sqlite:///var/lib/store.db", "sqlite:///var/lib/store.db", id="sqlite"),
    ],
)
def test_a_store_url_is_shown_with_every_form_of_password_hidden(url: str, shown: str) -> None:
    """Logs, errors, workflow history and Claude see a store URL only this way."""
    assert redact_store_url(url) == shown


async def test_a_password_given_as_a_query_parameter_is_hidden_in_the_store_url_and_errors(postgres_url: str) -> None:
    """The store's URL, which worker logs and every StoreError show, hides a ``?password=``; so do driver errors."""
    async with open_store(postgres_url + "?password=hunter2") as store:  # the test cluster trusts, ignoring it
        assert store.url == postgres_url + "?password=***"

    with pytest.raises(StoreError) as raised:
        open_store("postgresql://someone@127.0.0.1:1/nothing?password=s3cret")
    assert "s3cret" not in str(raised.value)
    assert str(raised.value).startswith(
        "cannot set up the store at postgresql://someone@127.0.0.1:1/nothing?password=***: "
    )


def test_a_libpq_keyword_string_is_refused_with_its_password_hidden() -> None:
    with pytest.raises(StoreError) as raised:
        open_store("host=db user=agent password=hunter2 dbname=runs")
    assert str(raised.value) == (
        "unknown store URL 'host=db user=agent password=*** dbname=runs': use sqlite:///absolute/path.db, "
        "sqlite:relative/path.db, postgresql://user:password@host:port/database (or postgres://...), or memory: "
        "(this process only). Set it with AGENT_RUNNER_STORE."
    )


def test_postgres_schema_creation_is_safe_when_workers_open_at_once(postgres_url: str) -> None:
    fresh = postgres_url.rsplit("/", 1)[0] + "/concurrent_open"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS concurrent_open")
        conn.execute("CREATE DATABASE concurrent_open")
    errors: list[BaseException] = []
    opened: list[ContentStore] = []
    barrier = threading.Barrier(6)

    def open_one() -> None:
        barrier.wait()
        try:
            opened.append(open_store(fresh))
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert len(opened) == 6


async def test_postgres_store_recovers_when_the_server_drops_its_connections(postgres_url: str) -> None:
    async with open_store(postgres_url) as store:
        ref, data = blob("before the drop")
        await store.put({ref: data})
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            dropped = conn.execute(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()) AS terminated"
            ).fetchone()
        assert dropped is not None and dropped[0] >= 1

        assert await store.get([ref]) == {ref: data}


@pytest.mark.slow
def test_a_worker_with_a_wrong_store_url_stops_at_start_saying_why() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "worker.py")],
        env={**os.environ, "AGENT_RUNNER_STORE": "bogus://x", "TEMPORAL_ADDRESS": "127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown store URL 'bogus://x'" in done.stderr and "Traceback" not in done.stderr
