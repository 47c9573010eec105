"""The CI scripts survive a fresh machine: apt sources in either form, nothing cached, each failure said.

`.ci/run` and `tests/containers/run.sh` run under `set -euo pipefail`, where a `grep` or `cat` that finds nothing
ends the script without a word. These tests run the scripts' own functions on the cases a fresh machine has.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTAINERS = ROOT / "tests" / "containers" / "run.sh"


def run_function(name: str, call: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `call` in bash with strict mode and the function `name` taken verbatim from run.sh."""
    text = CONTAINERS.read_text()
    start = text.index(f"{name}() {{")
    end = text.index("\n}\n", start) + 3
    script = tmp_path / "fn.sh"
    script.write_text("set -euo pipefail\n" + text[start:end] + call + "\n")
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize(
    "files",
    [
        pytest.param(
            {
                "sources.list.d/debian.sources": "Types: deb\n# a comment\nURIs: http://mirror.test/debian-security\n"
                "Suites: bookworm-security\nComponents: main\n\nTypes: deb\nURIs: http://mirror.test/debian\n"
                "Suites: bookworm bookworm-updates\nComponents: main"  # the last stanza ends at end of file
            },
            id="deb822-only",
        ),
        pytest.param(
            {
                "sources.list": "deb http://mirror.test/debian-security bookworm-security main\n"
                "deb [arch=amd64] http://mirror.test/debian bookworm main\n"
            },
            id="one-line-sources-list",
        ),
        pytest.param(
            {"sources.list.d/extra.list": "deb http://mirror.test/debian bookworm main\n"},
            id="one-line-list-file-only",
        ),
    ],
)
def test_container_tier_finds_the_mirror_in_either_apt_source_form(files: dict[str, str], tmp_path: Path) -> None:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, content in files.items():
        (apt / name).write_text(content)
    done = run_function("find_mirror", f'find_mirror "{apt}"; echo "rc=$?"', tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "http://mirror.test/debian\nrc=0\n", "")


def test_container_tier_says_so_when_apt_has_no_bookworm_mirror(tmp_path: Path) -> None:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list.d" / "other.sources").write_text(
        "Types: deb\nURIs: http://mirror.test/ubuntu\nSuites: noble\n"
    )
    done = run_function("find_mirror", f'find_mirror "{apt}" || echo "none: $?"', tmp_path)
    assert (done.returncode, done.stdout) == (0, "none: 1\n")
    # An empty apt folder (no sources.list at all) is not a crash either.
    done = run_function("find_mirror", f'find_mirror "{tmp_path / "empty"}" || echo "none: $?"', tmp_path)
    assert (done.returncode, done.stdout) == (0, "none: 1\n")


def test_container_tier_mirror_can_be_named_explicitly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_RUNNER_DEBIAN_MIRROR", "http://chosen.test/debian")
    done = run_function("find_mirror", f'find_mirror "{tmp_path}"', tmp_path)
    assert (done.returncode, done.stdout) == (0, "http://chosen.test/debian\n")


def test_container_tier_cleanup_with_nothing_mounted_removes_the_scratch_root(tmp_path: Path) -> None:
    # On a first run nothing is mounted under the scratch root: the cleanup must still succeed and remove it.
    rootfs = tmp_path / "rootfs.abc"
    (rootfs / "usr").mkdir(parents=True)
    text = CONTAINERS.read_text()
    start = text.index("    cleanup_rootfs() {")
    end = text.index("\n    }\n", start) + 7
    script = tmp_path / "cleanup.sh"
    script.write_text(
        f'set -euo pipefail\nrootfs="{rootfs}"\nROOTFS_TAR="{tmp_path}/x.tar"\n'
        + text[start:end]
        + 'cleanup_rootfs\necho "cleaned: $?"\n'
    )
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "cleaned: 0\n", "")
    assert not rootfs.exists()


@pytest.mark.parametrize("script", [".ci/run", "tests/containers/run.sh"])
def test_ci_scripts_parse(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stderr) == (0, "")
