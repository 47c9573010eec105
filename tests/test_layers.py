"""The package's layers, and a check that no import crosses one the wrong way.

From the bottom up (README, "How the code is laid out"):

contract    ``agent_runner/contract/``: names, input/output types (the run's input and its check among them),
            update payloads, live events, errors, the held-content format. Imports nothing of ours.
workflows   ``workflows/``: deterministic code only. Imports the contract.
store       ``agent_runner/{codec,store,content,reseal}.py``: where transcripts and big content live. Imports the
            contract.
activities  ``activities/``: the model call, tools, hooks. Imports the contract, the store and the workflows' pure
            helpers (the same request-building code runs on both sides), never the workflow itself.
client      ``agent_runner/{client,connection,live,temporal_server,process_exit}.py``: start, steer and watch runs,
            and end a process. Imports the contract, the store and the connection; never activities nor workflows (a
            run's input is checked with the contract's ``parse_run_input``, so a bad input fails before a run
            starts).
worker      ``agent_runner/{plugin,processes,worker,worker_command,tuning,backpressure,after_wait}.py``: puts
            workflows and activities on a Temporal worker.
testing     ``agent_runner/testing/``: the fake Messages API, public for tests of users' own agents. Imports nothing
            of ours, so such a test can load it alone.
commands    ``agent_runner/cli/``, ``agent_runner/console/``, ``agent_runner/{dev,gc,schedules,example_tools}.py``:
            the command line and the operators' web console (which uses the client and contract only). They never
            import workflow code: a run's input is checked through the client.

A module may import its own layer and the layers its row names; the test parses every module's imports (including
those inside functions, which are imports all the same) and fails on any other arrow.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS: dict[str, tuple[str, ...]] = {
    "contract": ("agent_runner/contract/",),
    "workflows": ("workflows/",),
    "store": ("agent_runner/codec.py", "agent_runner/store.py", "agent_runner/content.py", "agent_runner/reseal.py"),
    "activities": ("activities/", "agent_runner/mcp_config.py"),
    "client": (
        "agent_runner/client.py",
        "agent_runner/agent_tree.py",
        "agent_runner/connection.py",
        "agent_runner/live.py",
        "agent_runner/temporal_server.py",
        "agent_runner/process_exit.py",
        "agent_runner/priority.py",
    ),
    "worker": (
        "agent_runner/plugin.py",
        "agent_runner/processes.py",
        "agent_runner/worker.py",
        "agent_runner/worker_command.py",
        "agent_runner/tuning.py",
        "agent_runner/backpressure.py",
        "agent_runner/after_wait.py",
    ),
    "testing": ("agent_runner/testing/",),
    "commands": (
        "agent_runner/cli/",
        "agent_runner/dev.py",
        "agent_runner/gc.py",
        "agent_runner/schedules.py",
        "agent_runner/example_tools.py",
        "agent_runner/__init__.py",
        "agent_runner/console/",
    ),
}

ALLOWED: dict[str, set[str]] = {
    "contract": {"contract"},
    "workflows": {"contract", "workflows"},
    "store": {"contract", "store"},
    "activities": {"contract", "store", "workflows", "activities"},
    "client": {"contract", "store", "client"},
    "worker": {"contract", "store", "workflows", "activities", "client", "worker"},
    "testing": {"testing"},
    "commands": {"contract", "store", "activities", "client", "worker", "testing", "commands"},
}

# Modules of the workflows layer that activities may not import: the workflow itself and the rooms that act for it
# (its sandboxed code belongs to the workflow worker alone).
WORKFLOW_ONLY = {
    f"agent_runner.workflows.{name}"
    for name in (
        "agent_run",
        "approvals",
        "eager",
        "tool_calls",
        "search_attributes",
        "queries",
        "model_calls",
        "compaction",
        "boundary",
    )
}


def _module_name(rel: str) -> str:
    parts = list(Path(rel).with_suffix("").parts)
    if parts[0] in ("workflows", "activities"):
        parts.insert(0, "agent_runner")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files() -> list[str]:
    files = [*ROOT.glob("workflows/*.py"), *ROOT.glob("activities/*.py"), *ROOT.glob("agent_runner/**/*.py")]
    rels = {p.relative_to(ROOT).as_posix() for p in files}
    # agent_runner/workflows and agent_runner/activities are symlinks to the top-level folders: count each file once.
    return sorted(r for r in rels if not r.startswith(("agent_runner/workflows/", "agent_runner/activities/")))


def _layer_of_path(rel: str) -> str:
    for layer, prefixes in LAYERS.items():
        if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes):
            return layer
    raise AssertionError(f"{rel} belongs to no layer: add it to LAYERS in tests/test_layers.py and the README")


def _path_of_module(name: str) -> str | None:
    """The repository path of a module of ours (``agent_runner.x.y``), or None if there is no such module."""
    parts = name.split(".")[1:]
    base = "/".join(parts) if parts and parts[0] in ("workflows", "activities") else "/".join(["agent_runner", *parts])
    for rel in (f"{base}.py", f"{base}/__init__.py"):
        if (ROOT / rel).exists():
            return rel
    return None


def _layer_of_module(name: str) -> str | None:
    """The layer of an imported module of ours, or None for anything else (stdlib, third party)."""
    top = name.split(".")[0]
    if top in ("workflows", "activities", "worker"):
        raise AssertionError(f"import of {name!r}: import it as agent_runner.{name}; the top-level names are not ours")
    if top != "agent_runner" or name == "agent_runner":
        # The package itself imports its public names lazily, on first use: importing it crosses nothing.
        return None
    rel = _path_of_module(name)
    if rel is None:
        raise AssertionError(f"import of {name!r}, which is not a module of ours")
    return _layer_of_path(rel)


def _imports(rel: str, source: str) -> list[tuple[int, str]]:
    package = _module_name(rel)
    if not rel.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, rel)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            found.append((node.lineno, module))
            # `from agent_runner import client` imports the module agent_runner.client.
            found += [
                (node.lineno, f"{module}.{alias.name}")
                for alias in node.names
                if module.startswith("agent_runner") and _path_of_module(f"{module}.{alias.name}")
            ]
    return found


def _crossings(rel: str, source: str) -> list[str]:
    layer = _layer_of_path(rel)
    found = []
    for line, name in _imports(rel, source):
        target = _layer_of_module(name)
        if target is not None and (target not in ALLOWED[layer] or (layer == "activities" and name in WORKFLOW_ONLY)):
            found.append(f"{rel}:{line} ({layer}) imports {name} ({target})")
    return found


def test_every_module_belongs_to_a_layer() -> None:
    for rel in _source_files():
        _layer_of_path(rel)


def test_no_import_crosses_a_layer_the_wrong_way() -> None:
    crossings = [c for rel in _source_files() for c in _crossings(rel, (ROOT / rel).read_text())]
    assert crossings == []


def test_the_check_sees_each_kind_of_crossing() -> None:
    # Negative controls: the same check, on sources that cross a layer, objects to each.
    assert _crossings("agent_runner/client.py", "from agent_runner.activities.tools import tool_options") == [
        "agent_runner/client.py:1 (client) imports agent_runner.activities.tools (activities)"
    ]
    assert _crossings("workflows/carry.py", "def f():\n    from agent_runner import client") == [
        "workflows/carry.py:2 (workflows) imports agent_runner.client (client)"
    ]
    assert _crossings("agent_runner/contract/types.py", "from ..store import open_store") == [
        "agent_runner/contract/types.py:1 (contract) imports agent_runner.store (store)"
    ]
    assert _crossings("activities/tools.py", "import agent_runner.workflows.agent_run") == [
        "activities/tools.py:1 (activities) imports agent_runner.workflows.agent_run (workflows)"
    ]
    assert _crossings("agent_runner/cli/runs.py", "from agent_runner.workflows.run_input import parse_run_input") == [
        "agent_runner/cli/runs.py:1 (commands) imports agent_runner.workflows.run_input (workflows)"
    ]
    assert _crossings("agent_runner/client.py", "from agent_runner.workflows.agent_run import AgentRun") == [
        "agent_runner/client.py:1 (client) imports agent_runner.workflows.agent_run (workflows)"
    ]
    assert _crossings("agent_runner/client.py", "from agent_runner.workflows.run_input import parse_run_input") == [
        "agent_runner/client.py:1 (client) imports agent_runner.workflows.run_input (workflows)"
    ]
    assert _crossings("agent_runner/client.py", "from agent_runner.contract.run_input import parse_run_input") == []
    assert _crossings("workflows/carry.py", "from agent_runner.contract.types import Usage") == []
    with pytest.raises(AssertionError, match="import it as agent_runner.workflows.types"):
        _crossings("agent_runner/cli/__init__.py", "from workflows.types import X")


def test_the_distribution_installs_one_package() -> None:
    # Nothing generic at the top of site-packages: every package installs under agent_runner, the folders of the
    # design card (workflows/, activities/) mapped into it, and no top-level module (worker.py stays in the repository).
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in setuptools["packages"]} == {"agent_runner"}
    assert setuptools["package-dir"] == {"agent_runner.workflows": "workflows", "agent_runner.activities": "activities"}
    assert "py-modules" not in setuptools
    assert {p.name for p in ROOT.glob("agent_runner/*") if p.is_symlink()} == {"workflows", "activities"}


def _reaches_into_the_run(rel: str, source: str) -> list[str]:
    """Where a workflow module touches a private attribute of the run (``run._x``, ``self._run._x``).

    The rooms see the run through ``RunView`` (``workflows/run_view.py``) and nothing else: its private attributes
    are ``AgentRun``'s own, free to change without a room noticing.
    """
    found = []
    for node in ast.walk(ast.parse(source, rel)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
        if name.lstrip("_") == "run":
            found.append(f"{rel}:{node.lineno} reaches into the run: {ast.unparse(node)}")
    return found


def test_rooms_see_the_run_through_its_view() -> None:
    rooms = sorted(p for p in ROOT.glob("workflows/*.py") if p.name != "agent_run.py")
    reaches = [r for path in rooms for r in _reaches_into_the_run(path.name, path.read_text())]
    assert reaches == []


def test_the_check_sees_a_room_reaching_into_the_run() -> None:
    # Negative control: the same scan objects to each way of reaching past RunView.
    source = "def f(self, run):\n    run._state.stop = 'x'\n    self._run._event('e')\n    return run.state, run.spec"
    assert _reaches_into_the_run("approvals.py", source) == [
        "approvals.py:2 reaches into the run: run._state",
        "approvals.py:3 reaches into the run: self._run._event",
    ]
