#!/usr/bin/env bash
# The browser tier: the web console (agent_runner/console/) driven in headless Chromium by Selenium.
#
#     bash tests/console/run.sh [pytest args...]        # as root if Chromium is not installed yet
#
# 1. Installs Debian's chromium and chromium-driver when missing (apt-get, whichever form its sources take: deb822
#    .sources or one-line lists). The browser comes from Debian only: nothing downloads one.
# 2. Runs `pytest -m browser tests/console` in the project's .venv (made by `make test` or `make .venv/.installed`).
#    The test saves screenshots of the console to tests/console/screenshots/.
#
# Exits non-zero, saying what failed, on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$ROOT/.venv/bin/python"
say() { printf '[browser] %s\n' "$*"; }
fail() {
    printf '[browser] FAILED: %s\n' "$*" >&2
    exit 1
}

missing=()
for pkg in chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    [[ "$(id -u)" == 0 ]] || fail "${missing[*]} missing, and only root can apt-get install it: run this as root"
    say "installing Debian's ${missing[*]}"
    apt-get update -qq || fail "apt-get update (exit $?): apt cannot read its package lists; check /etc/apt/sources.list.d/"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        fail "apt-get install ${missing[*]} (exit $?); its own message is above"
fi
for tool in /usr/bin/chromium /usr/bin/chromedriver; do
    [[ -x "$tool" ]] || fail "$tool is missing although its package is installed"
done
[[ -x "$PY" ]] || fail "$PY missing: run 'make test' (or 'make .venv/.installed') first"
"$PY" -c "import selenium" 2>/dev/null || fail "selenium is not in .venv: run '$PY -m pip install -e .[dev]'"

cd "$ROOT"
say "$("$PY" -c 'import selenium; print("selenium", selenium.__version__)'), $(/usr/bin/chromedriver --version)"
exec "$PY" -m pytest -m browser -q tests/console "$@"
