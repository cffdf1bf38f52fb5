VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The demo needs the core install only (tiktoken and rich), not the test tools.
CORE := $(VENV)/.core
CHROMIUM ?= /usr/bin/chromium
REDIS_SERVER ?= /usr/bin/redis-server
# The agent CLIs the client tests run through the proxy, installed here (git-ignored).
# The versions tested, as lower bounds: newer releases are installed and tested too.
NPM_TOOLS ?= .npm-tools
AGENT_CLIS := @anthropic-ai/claude-code@>=2.1.332 @openai/codex@>=0.171.0

.PHONY: demo serve test lint typecheck docs bench clean chromium redis-server agent-clis

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

test: lint typecheck docs chromium redis-server agent-clis
	# Three processes: most tests wait on servers and subprocesses, not on a core (four were no faster).
	CONTEXTFOLD_CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest -q -n 3

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

# The client tests run Claude Code and Codex CLI as users do (npm packages, never a global install).
agent-clis:
	@test -x $(NPM_TOOLS)/node_modules/.bin/claude -a -x $(NPM_TOOLS)/node_modules/.bin/codex || { \
	  command -v npm >/dev/null || { echo "npm is missing: the client tests need it to install Claude Code and Codex CLI (apt-get install -y npm)" >&2; exit 1; }; \
	  echo "installing Claude Code and Codex CLI into $(NPM_TOOLS) (for the client tests)"; \
	  npm install --prefix $(NPM_TOOLS) --no-audit --no-fund --loglevel=error '$(word 1,$(AGENT_CLIS))' '$(word 2,$(AGENT_CLIS))' \
	  || { echo "npm could not install the agent CLIs into $(NPM_TOOLS)" >&2; exit 1; }; }

# The docs site into site/; --strict fails on a broken link, an orphan page or a bad reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP) agent-clis
	$(PY) -m pip install -q -e '.[peers]'
	@# ctok, bench/anthropic_tokens.py's reference count, declares Python 3.12 and runs on 3.11.
	$(PY) -m pip install -q --ignore-requires-python 'ctok>=1.3'
	@for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache site $(NPM_TOOLS)
