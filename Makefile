# Two commands do all the set-up (see README):
#   make book   create .venv, install the pinned packages, build the book and serve it
#   make test   lint with ruff, then run the whole test suite (creating .venv first if needed)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
# `make book` serves the book at http://$(HOST):$(PORT)/; HOST=0.0.0.0 serves it to other machines too.
HOST   ?= 127.0.0.1
# Where pip finds torch. PyPI's Linux torch is the CUDA build (several GB of NVIDIA libraries); on a machine
# without an NVIDIA GPU, TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU build of the same version.
TORCH_INDEX ?=
HTML   := book/_build/html

# The version a bundle is named for: the tag at HEAD, else "latest" (main's name on the published site).
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || echo latest)

.PHONY: book build-book bundle serve lint test exercises clean

book: build-book serve

# The virtual environment is rebuilt when a pin or the package metadata changes.
# torch goes first and alone: any other route can pull several GB of CUDA wheels.
$(BIN)/.installed: pyproject.toml requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) \
		"torch==$$(sed -n 's/^torch==//p' requirements/constraints.txt)"
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e ".[book,test]"
	touch $@

# Students' JupyterLab shows none of nbgrader's instructor tools (its menu, Create Assignment, Formgrader,
# the course and assignment lists): aisys authors exercises in solutions/ and grades with aisys-grader.
# Only "Validate" stays. nbgrader's docs disable them the same way, at the environment's level.
NBGRADER_INSTRUCTOR_PLUGINS := menu create-assignment formgrader course-list assignment-list
NBGRADER_INSTRUCTOR_SERVER  := formgrader course_list assignment_list
$(BIN)/.student-lab: $(BIN)/.installed Makefile
	$(BIN)/jupyter labextension disable --level=sys_prefix \
		$(addprefix @jupyter/nbgrader:,$(NBGRADER_INSTRUCTOR_PLUGINS)) >/dev/null 2>&1
	$(BIN)/jupyter server extension disable --sys-prefix \
		$(addprefix nbgrader.server_extensions.,$(NBGRADER_INSTRUCTOR_SERVER)) >/dev/null 2>&1
	touch $@

# MathJax is served from the built book, never from a CDN.
book/node_modules/.installed: book/package.json book/package-lock.json
	cd book && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# One BLAS thread, as the tests build it: numpy's small products spend more on OpenBLAS's threads than they save
# (a cell of the speculative-decoding page took 10 s with them and 2.3 s without, on 2 cores).
build-book: $(BIN)/.student-lab book/node_modules/.installed
	OPENBLAS_NUM_THREADS=1 $(BIN)/jupyter-book build book --warningiserror --nitpick --keep-going
	@echo
	@echo "The book is built: open $(CURDIR)/$(HTML)/index.html"
	@echo "or http://$(HOST):$(PORT)/ while 'make book' serves it (Ctrl-C stops)."

# The offline bundle: the built book and the student notebooks in one zip (book/publish.py), as releases attach it.
bundle: build-book
	$(BIN)/python book/publish.py bundle --html $(HTML) --version $(VERSION) --out dist/aisys-book-$(VERSION).zip

serve:
	$(BIN)/python -m http.server $(PORT) --bind $(HOST) --directory $(HTML)

# ruff's settings are in pyproject.toml; `make test` lints first and stops on a lint error.
lint: $(BIN)/.installed
	$(BIN)/ruff check .

# One BLAS thread per process: pytest-xdist already runs a worker per core, and numpy's OpenBLAS threads
# on top of them fight over the cores (the tiny model's small matrix products slowed down by 10x and more).
test: lint $(BIN)/.student-lab book/node_modules/.installed
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -n auto --dist loadfile --durations=25

# Regenerate the student and nbgrader notebooks from solutions/ (never edit those by hand).
exercises: $(BIN)/.installed
	$(BIN)/aisys-grader generate

clean:
	rm -rf $(HTML) book/_build dist
