# Two commands on a fresh machine: `make demo` and `make test`. Each installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_STAMP := $(VENV)/.torch-installed

# This project's machines have no GPU: install TensorFlow's CPU wheel here, and for the
# tests PyTorch 2.13.0 (its CPU build lies on these machines' disk; a plain `torch` pulls
# several GB of CUDA libraries). Users' own builds are not pinned to them (pyproject.toml).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "tensorflow-cpu==2.21.*" "keras>=3.15"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

# PyTorch, for the PyTorch adapter's tests only (`make demo` does not need it).
$(TORCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet "torch==2.13.0" "safetensors>=0.4"
	touch $(TORCH_STAMP)

.PHONY: install demo test lint browser
install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gradient-doctor run --report out/story1_report.json examples/story1_gnn_softmax_overflow.py; \
	status=$$?; echo "gradient-doctor exit status: $$status (1 = problem diagnosed)"; \
	test $$status -eq 1

lint: $(STAMP)
	$(VENV)/bin/ruff format --check src tests examples benchmarks
	$(VENV)/bin/ruff check src tests examples benchmarks

# The HTML report is tested in a real headless browser: Debian's chromium, installed here
# when missing and run as root (elsewhere the test skips, and fails under CI=true).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	echo "chromium is missing and could not be installed (needs root): the browser test will skip"

# The tests run on two workers, a test file to each at a time (its module fixtures
# built once); the end-to-end runs spend most of their time in one core.
TEST_WORKERS ?= 2
test: $(STAMP) $(TORCH_STAMP) lint browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile
