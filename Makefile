VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The demo needs the core install only (tiktoken and rich), not the test tools.
CORE := $(VENV)/.core
CHROMIUM ?= /usr/bin/chromium
REDIS_SERVER ?= /usr/bin/redis-server

.PHONY: demo serve test lint typecheck docs bench clean chromium redis-server

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,docs]'
	touch $(STAMP) $(CORE)

$(CORE): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $(CORE)

demo: $(CORE)
	$(VENV)/bin/contextfold demo

serve: $(STAMP)
	$(VENV)/bin/contextfold serve --demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy src/

test: lint typecheck docs chromium redis-server
	CONTEXTFOLD_CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest -q

# The page tests drive Debian's Chromium through Playwright (never a browser Playwright downloads).
chromium:
	@test -x $(CHROMIUM) || { \
	  echo "installing chromium with apt-get (for the page tests)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || { echo "apt-get could not install chromium: the page tests need $(CHROMIUM) (run as root, or install it)" >&2; exit 1; }; \
	  test -x $(CHROMIUM) || { echo "chromium installed but $(CHROMIUM) is missing: set CHROMIUM=" >&2; exit 1; }; }

# The worker tests start Redis servers of their own (stopped and restarted: a broker outage).
redis-server:
	@test -x $(REDIS_SERVER) || { \
	  echo "installing redis-server with apt-get (for the worker tests)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } \
	  || { echo "apt-get could not install redis-server: the worker tests need $(REDIS_SERVER) (run as root, or install it)" >&2; exit 1; }; \
	  test -x $(REDIS_SERVER) || { echo "redis-server installed but $(REDIS_SERVER) is missing: set REDIS_SERVER=" >&2; exit 1; }; }

# The docs site into site/; --strict fails on a broken link, an orphan page or a bad reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[peers]'
	@# ctok, bench/anthropic_tokens.py's reference count, declares Python 3.12 and runs on 3.11.
	$(PY) -m pip install -q --ignore-requires-python 'ctok>=1.3'
	@for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache site
