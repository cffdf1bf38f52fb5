VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo serve test lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/contextfold demo

serve: $(STAMP)
	$(VENV)/bin/contextfold serve --demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy src/

test: lint typecheck
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	@for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
