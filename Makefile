# The two commands of the README, and the checks they build on.
#   make demo   install what is needed, then run a real agent run on the embedded Temporal server
#   make test   install what is needed, then lint, type-check and run every test tier
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint check-tests bench bench-history bench-long bench-peer bench-profile bench-load

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/agent-runner demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy agent_runner worker.py

# The default tier first (fast), then the slow tier (real processes killed and restarted). Each tier is bounded: a
# session that hangs where pytest-timeout cannot reach (a teardown after a timed-out test) is sent SIGABRT after
# 30 minutes, faulthandler prints every thread's stack (where it hung), and the tier fails.
TIER := timeout --signal=ABRT 1800 $(PY) -X faulthandler -m pytest
check-tests: $(STAMP)
	$(TIER) -m "not slow and not browser" -q || { echo "make: the default tier failed (exit $$?; 124: it hung and was stopped after 30 minutes)" >&2; exit 1; }
	$(TIER) -m slow -q || { echo "make: the slow tier failed (exit $$?; 124: it hung and was stopped after 30 minutes)" >&2; exit 1; }

test: lint check-tests

bench: $(STAMP)
	$(PY) bench/overhead.py

# History and store growth per iteration vs the naive design (a few minutes), and one 10,000-iteration run (~20 min).
bench-history: $(STAMP)
	$(PY) bench/history.py

bench-long: $(STAMP)
	$(PY) bench/history.py --long

# agent-runner beside pydantic-ai on Temporal and the Temporal floor, tool results of 1, 10 and 100 KB (about 2
# minutes); needs the bench extra, which this target installs into the venv first.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-peer: $(BENCH_STAMP)
	$(PY) bench/peer.py

# Where an AgentRun iteration's time and CPU go: variants without one suspect each, counts, then a py-spy profile.
bench-profile: $(BENCH_STAMP)
	$(PY) bench/hotspots.py
	$(PY) bench/hotspots.py --spy

# N concurrent runs with a 1 s model, the floor vs agent-runner-worker --processes 1 and 2 (a few minutes).
bench-load: $(STAMP)
	$(PY) bench/load.py
