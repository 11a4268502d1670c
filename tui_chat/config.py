"""Typed settings for one run of tui-chat (defaults < environment < command-line flags)."""

from __future__ import annotations

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
        resume: reopen the newest saved conversation (``--resume``).
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
    resume: bool = False
