# tui-chat: `make run` and `make test` do everything on a fresh machine.
# llama-cpp-python is built from source for the machine at hand and proved on it before
# it is trusted (README, "The llama.cpp build"); `make run CUDA=1` builds it with CUDA
# and stops, loudly, when that build cannot offload to a GPU.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo models; `make models` places both. SmolLM2 (an instruct model with its own
# chat template) is the default of `make run` and `tui-chat`; Gemma (a base model, no
# template) keeps the tests of the built-in template path and the benchmark.
SMOLLM2 := models/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA := models/gemma-3-270m-q4_k_m.gguf
MODEL := $(SMOLLM2)

# The build of llama-cpp-python belongs to one machine: its key names the CPU's
# instruction sets, CUDA or not, and the CMake arguments (scripts/llama_build.py,
# tui_chat/buildinfo.py). The stamp is named after the key, so a venv carried to
# another CPU, `CUDA=1` after a CPU build (case C39) or the reverse, or other
# CMAKE_ARGS, build again; a build already made for this key is reused from
# ~/.cache/tui-chat/llama-cpp-python/<key>/. The stamp is written only after the
# installed build has run a prompt of several batches (`llama_build.py prove`).
ifeq ($(CUDA),1)
CUDA_FLAG := --cuda
endif
LLAMA_BUILD_ENV := CMAKE_ARGS='$(CMAKE_ARGS)'
LLAMA_KEY := $(shell $(LLAMA_BUILD_ENV) $(PYTHON) scripts/llama_build.py key $(CUDA_FLAG))
ifeq ($(LLAMA_KEY),)
$(error scripts/llama_build.py key failed: is $(PYTHON) (3.11 or newer) installed?)
endif
STAMP := $(VENV)/.installed-$(LLAMA_KEY)

.PHONY: run test check bench model models install clean gpu-check

run: install $(MODEL)
	$(BIN)/tui-chat $(ARGS)

test: install $(SMOLLM2) $(GEMMA) tmux spec templates
	$(BIN)/lint-imports
	$(BIN)/pytest $(PYTEST_ARGS)

# What a developer runs before a commit: formatting, lint, types (sources, tests, the
# benchmark and scripts), the import contracts of pyproject.toml, then the tests.
check: install $(SMOLLM2) $(GEMMA) tmux spec templates
	$(BIN)/ruff format --check tui_chat tests bench scripts
	$(BIN)/ruff check tui_chat tests bench scripts
	$(BIN)/mypy tui_chat tests bench scripts
	$(BIN)/lint-imports
	$(BIN)/pytest $(PYTEST_ARGS)

bench: install $(GEMMA)
	$(BIN)/python -m bench

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	rm -f $(VENV)/.installed-*
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(LLAMA_BUILD_ENV) $(BIN)/python scripts/llama_build.py install $(CUDA_FLAG)
	$(BIN)/python -m pip install --quiet -e '.[dev,model]'
	$(BIN)/python -m compileall -q tui_chat
ifeq ($(CUDA),1)
	$(BIN)/python scripts/llama_build.py check-gpu
endif
	test -f $(SMOLLM2) || $(BIN)/python scripts/place_model.py smollm2 $(SMOLLM2)
	$(LLAMA_BUILD_ENV) $(BIN)/python scripts/llama_build.py prove $(CUDA_FLAG) \
	  --model $(SMOLLM2) --stamp $@

# Fails loudly unless the installed llama-cpp-python offloads to a GPU.
gpu-check:
	$(BIN)/python scripts/llama_build.py check-gpu

model: $(MODEL)

models: $(SMOLLM2) $(GEMMA)

# Downloaded wheels are kept in models/.cache (git-ignored, kept by `make clean`).
$(SMOLLM2): | $(STAMP)
	$(BIN)/python scripts/place_model.py smollm2 $@

$(GEMMA): | $(STAMP)
	$(BIN)/python scripts/place_model.py gemma $@

# The CommonMark spec examples for tests/test_markdown_spec.py, from markdown-it-py's
# sdist on PyPI, into .cache/ (git-ignored). Offline the spec test skips.
.PHONY: spec
spec: | $(STAMP)
	$(BIN)/python -m tests.commonmark_spec

# The published chat templates of llama.cpp's models/templates/ for
# tests/test_template_corpus.py, from the llama-cpp-python sdist (.cache/sdist/, else
# PyPI) into .cache/templates/ (git-ignored). Offline the corpus tests skip.
.PHONY: templates
templates: | $(STAMP)
	$(BIN)/python -m tests.template_corpus

# tmux for the end-to-end tests, from the system packages when it is missing: apt-get
# (Debian, Ubuntu) as root or with password-less sudo; the package lists are refreshed
# only if the first try fails (a fresh image has none). Without tmux those tests skip.
.PHONY: tmux
tmux:
	@command -v tmux >/dev/null 2>&1 || { \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo="sudo -n"; \
	  apt="$$sudo env DEBIAN_FRONTEND=noninteractive apt-get -y -qq"; \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "installing tmux for the end-to-end tests (apt-get)"; \
	    $$apt install --no-install-recommends tmux >/dev/null 2>&1 || \
	    { $$apt update >/dev/null 2>&1 && \
	      $$apt install --no-install-recommends tmux >/dev/null 2>&1; }; \
	  fi; \
	  command -v tmux >/dev/null 2>&1 || \
	    echo "tmux could not be installed; the tmux end-to-end tests will be skipped"; }

clean:
	rm -rf $(VENV) build *.egg-info
