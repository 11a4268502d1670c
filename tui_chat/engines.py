"""make_engine: the one place an engine is chosen and built, from a run's settings.

The CLI builds the run's engine here, and the model picker (F3) a new one; a server's
(``--api-base``) or the embedded llama.cpp engine. Nothing loads here: the model file's
header is checked (one clear error before anything starts), and the model loads later
on the session's engine thread.
"""

from __future__ import annotations

from collections.abc import Callable

from tui_chat.config import Config, default_threads
from tui_chat.engine.base import Engine, EngineError
from tui_chat.paths import DEFAULT_MODEL_SYSTEM_PROMPT, default_model_path, native_log_path

EngineFactory = Callable[[Config], Engine]
"""Builds an engine for a config without loading it: :func:`make_engine` in the app,
a fake in tests."""


def make_engine(config: Config) -> Engine:
    """The engine for ``config``: a server's (``--api-base``), else the llama.cpp engine;
    the model file's header is checked here (its tensor table, and whether the weights
    fit in memory, when the engine loads it: :meth:`LlamaEngine.load`).

    Raises:
        EngineError: a bad --api-base; the model file is missing or not a GGUF language
            model; the installed llama-cpp-python was built for another CPU.
    """
    if config.api_base is not None:
        from tui_chat.engine.remote import RemoteEngine

        return RemoteEngine(
            config.api_base,
            api_key=config.api_key,
            model=config.api_model,
            read_timeout_s=config.api_timeout_s,
        )
    from tui_chat.engine.llama import LlamaEngine
    from tui_chat.engine.modelfile import read_model_header

    path = config.model or default_model_path()
    if config.model is None and not path.exists():
        raise EngineError(
            f"the default model is not in {path.parent}/: run 'make run' (or 'make model') "
            "to place it, or pass --model PATH"
        )
    header = read_model_header(path)  # the rest is checked on the engine thread
    return LlamaEngine(
        header,
        n_ctx=config.n_ctx,
        n_ctx_chosen=config.origins.get("n_ctx", "default") != "default",
        n_gpu_layers=config.n_gpu_layers,
        n_threads=config.threads or default_threads(),
        n_batch=config.n_batch,
        chat_format=config.chat_format,
        log_path=native_log_path(),
        default_system_prompt=DEFAULT_MODEL_SYSTEM_PROMPT if config.model is None else None,
        preflight=_check_build_fits_this_cpu,
    )


def _check_build_fits_this_cpu() -> None:
    """Refuse a llama-cpp-python built for a CPU with instruction sets this one lacks
    (a venv carried to another machine): it would die of SIGILL at the first prompt.
    Reads ``make install``'s stamp (:mod:`tui_chat.buildinfo`); nothing is known, and
    nothing refused, for an install without one. Run by the engine thread before
    llama.cpp loads (not before the first frame: it reads /proc/cpuinfo and the stamp).

    Raises:
        EngineError: the build does not fit; the message says how to rebuild.
    """
    from tui_chat import buildinfo

    stamp = buildinfo.installed_stamp()
    missing = buildinfo.missing_features(stamp)
    if stamp is not None and missing:
        raise EngineError(buildinfo.unfit_build_message(missing, stamp))
