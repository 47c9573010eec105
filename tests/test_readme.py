"""The README's tool example passes the project's own lint, so that code copied from it starts clean."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOL_EXAMPLE_START = "# my_pkg/tools.py\n"


def tool_example() -> str:
    """The README's Python block that opens with ``# my_pkg/tools.py``."""
    blocks = re.findall(r"^```python\n(.*?)^```$", (REPO / "README.md").read_text(), re.S | re.M)
    [example] = [block for block in blocks if block.startswith(TOOL_EXAMPLE_START)]
    return str(example)


def lint(*command: str) -> subprocess.CompletedProcess[str]:
    # From the repository, with its pyproject.toml, and mypy's cache that `make lint` has warmed.
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_readme_tool_example_passes_ruff_and_mypy_strict(tmp_path: Path) -> None:
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    module = tmp_path / "my_pkg" / "tools.py"
    module.write_text(tool_example())
    for command in (
        ("ruff", "check", "--config", "pyproject.toml", "--output-format", "concise", str(module)),
        ("ruff", "format", "--config", "pyproject.toml", "--check", "--diff", str(module)),
        ("mypy", "--config-file", "pyproject.toml", str(module)),
    ):
        done = lint(*command)
        assert done.returncode == 0, f"{' '.join(command[:2])}:\n{done.stdout}{done.stderr}"


def test_the_fault_matrix_is_the_guarantees_tables_proofs_and_each_exists() -> None:
    from tests.conftest import guarantee_test_files

    files = guarantee_test_files()
    # Every promise names its proof, and the proofs are files of this repository (`-m fault_matrix` runs them).
    assert "tests/test_tool_effects.py" in files and "tests/test_durability.py" in files
    assert len(files) >= 15
    missing = [f for f in files if not (REPO / f).is_file()]
    assert missing == []
