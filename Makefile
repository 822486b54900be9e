# The course's front door. `make lab` for students, `make test` for everyone else.
# Each target sets up what it needs on a fresh machine that has only Python >= 3.11 and make.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
# The instructors' and the test suite's environment (pytest, nbgrader, Playwright): apart from the student's, so
# the student's JupyterLab has no nbgrader menu or panels.
DEV_VENV ?= .venv-dev
DPY    := $(DEV_VENV)/bin/python
DPIP   := $(DPY) -m pip --disable-pip-version-check
PORT   ?= 8888
# processes `make test` runs the suite on (pytest-xdist; a test file stays on one of them)
TEST_WORKERS ?= 2
WORK   := my-work
FIRST_LESSON := lessons/00_big_picture.ipynb

.PHONY: lab test test-fast lint labs check check-labs validate gpu-test bench strip nbgrader clean help

help:
	@echo "make lab        start JupyterLab on your copy of the course in $(WORK)/ (sets up $(VENV) first)"
	@echo "make test       lint, check labs/ is generated, validate every notebook, run the test suite (in $(DEV_VENV))"
	@echo "make test-fast  only what your change touches: its tests, its notebooks (SINCE=main adds your commits)"
	@echo "make check      every authoring mistake in the notebooks, one line each with its fix (seconds)"
	@echo "make labs       regenerate labs/ from solutions/ (keeps a lab you edited; writes the new one beside it)"
	@echo "make validate   execute lessons, solutions (checks pass) and labs (checks fail on the stubs); NB=lab1: one"
	@echo "make gpu-test   the tests that need a Hopper GPU"
	@echo "make bench      benchmarks against cuBLAS, on a Hopper GPU"
	@echo "make strip      remove outputs from the course's notebooks before committing (never from $(WORK)/)"
	@echo "make nbgrader   lay the course out as an nbgrader course in nbgrader/ and generate the assignments"

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "the course needs Python >= 3.11, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)

# The stamps record that the install matches pyproject.toml.
$(VENV)/.course-installed: pyproject.toml | $(VENV)/bin/python
	@echo "setting up the course's Python environment in $(VENV)/ (once; a few minutes):"
	@$(PY) -m helpers.course.labserver install
	@$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null 2>&1 || true
	@$(PY) -m helpers.course.workspace --settings-only
	@touch $@

$(DEV_VENV)/bin/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "the course needs Python >= 3.11, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(DEV_VENV)

$(DEV_VENV)/.dev-installed: pyproject.toml | $(DEV_VENV)/bin/python
	$(DPIP) install -q --upgrade pip
	$(DPIP) install -q -e ".[dev]"
	$(DPY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null
	@touch $@

$(DEV_VENV)/.gpu-installed: pyproject.toml $(DEV_VENV)/.dev-installed
	$(DPIP) install -q -e ".[dev,gpu]"
	@touch $@

# Students work in $(WORK)/ (git-ignored): a copy of lessons/ and labs/ that `make test` and `git pull` never touch.
# The last line it prints is the address to open (JupyterLab's own noise is dropped: helpers/course/labserver.py).
lab: $(VENV)/.course-installed
	@$(PY) -m helpers.course.workspace
	@$(PY) -m helpers.course.labserver run --root "$(CURDIR)/$(WORK)" --port $(PORT) --open $(FIRST_LESSON)

lint: $(DEV_VENV)/.dev-installed
	$(DEV_VENV)/bin/ruff check helpers tests bench tools

# `make labs` and `make validate` run the checks of `make check` first.
check: $(DEV_VENV)/.dev-installed
	$(DPY) -m helpers.course.author check

labs: $(DEV_VENV)/.dev-installed
	$(DPY) -m helpers.course.labgen generate

check-labs: $(DEV_VENV)/.dev-installed
	$(DPY) -m helpers.course.labgen check

validate: $(DEV_VENV)/.dev-installed
	$(DPY) -m helpers.course.labgen validate $(if $(NB),--only $(NB))

test: lint check-labs validate
	$(DPY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile --durations=15

test-fast: $(DEV_VENV)/.dev-installed
	$(DPY) -m helpers.course.affected $(if $(SINCE),--since $(SINCE))

gpu-test: $(DEV_VENV)/.gpu-installed
	$(DPY) -m pytest -m gpu -v tests

bench: $(DEV_VENV)/.gpu-installed
	$(DPY) bench/ladder.py
	$(DPY) bench/shapes.py

strip: $(DEV_VENV)/.dev-installed
	$(DPY) -m helpers.course.labgen strip

nbgrader: $(DEV_VENV)/.dev-installed
	$(DPY) -m helpers.course.labgen nbgrader

clean:
	rm -rf $(VENV) $(DEV_VENV) .pytest_cache .ruff_cache .cache test-artifacts nbgrader

# A class on one machine: JupyterHub with the course for every account, nbgrader's exchange, autograding as an
# unprivileged account (docs/hub.md). Needs root (sudo); settings: HOPPER_HUB_* (e.g. HOPPER_HUB_STUDENTS="a b").
HUB_SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
HUB_ENV := $(foreach v,$(filter HOPPER_HUB_%,$(.VARIABLES)),$(v)="$($(v))")
.PHONY: hub
hub:
	$(HUB_SUDO) env $(HUB_ENV) hub/setup.sh
	$(HUB_SUDO) env $(HUB_ENV) hub/start.sh
