"""Typed settings for one run of tui-chat (defaults < environment < command-line flags)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tui_chat.engine.base import SamplingParams


@dataclass
class Config:
    """Everything the app and the engine need to start.

    Attributes:
        model: GGUF path; None means the bundled default model.
        n_ctx: context window in tokens.
        n_gpu_layers: layers offloaded to the GPU; -1 = all (CUDA build).
        threads: CPU threads for decode; None = llama-cpp-python's default.
        n_batch: prompt tokens per batch (also the prefill cancel granularity).
        chat_format: chat template override, or None for automatic.
        system_prompt: optional system message.
        sampling: sampling settings.
        render_interval_ms: paint timer period in milliseconds (60-100 recommended).
        trace: JSON-lines timeline file (``--trace``), or None.
        history: save conversations to the history database.
        resume: reopen a saved conversation: True for the newest (``--resume``), a
            conversation id (``--resume ID``), False for none.
        api_base: an OpenAI-compatible server's API root (``--api-base``); set, it
            replaces the embedded llama.cpp engine.
        api_key: the server's API key (``--api-key`` or the environment, see
            :func:`api_key_from_env`). Kept out of ``repr``; never stored or logged.
        api_model: the server's model to use; None = the first it lists.
        api_timeout_s: longest wait for the server's next token, in seconds (the wait
            for the first includes the server's prefill).
    """

    model: Path | None = None
    n_ctx: int = 4096
    n_gpu_layers: int = 0
    threads: int | None = None
    n_batch: int = 256
    chat_format: str | None = None
    system_prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    render_interval_ms: int = 80
    trace: Path | None = None
    history: bool = True
    resume: bool | int = False
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_model: str | None = None
    api_timeout_s: float = 60.0


API_KEY_VARIABLES = ("TUI_CHAT_API_KEY", "OPENAI_API_KEY")
"""Environment variables that hold the server's API key, the first set one wins
(``OPENAI_API_KEY`` is the name OpenAI's own clients read)."""


def api_key_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from the environment (:data:`API_KEY_VARIABLES`), or None.

    The key goes to whatever server ``--api-base`` names.
    """
    env = os.environ if environ is None else environ
    return next((env[name] for name in API_KEY_VARIABLES if env.get(name)), None)
