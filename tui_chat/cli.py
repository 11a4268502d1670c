"""Command line: parse flags, then run the TUI or headless mode. Exit codes:

0 success; 1 a reply failed in headless mode; 2 bad start-up input (flag, model file,
terminal); 130 interrupted by Ctrl+C in headless mode.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from tui_chat.config import Config
from tui_chat.engine.base import CancelToken, ChatMessage, Engine, EngineError, SamplingParams
from tui_chat.paths import default_model_path, native_log_path


class UsageError(Exception):
    """Bad start-up input; the message is one line, the exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _unit_float(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; ``--help`` names the native log file."""
    defaults = SamplingParams()
    p = _Parser(
        prog="tui-chat",
        description="Chat with a local GGUF model in the terminal (llama.cpp inside).",
        epilog=(
            f"llama.cpp's own log lines never reach the terminal; they are written to "
            f"{native_log_path()}. Keys: Enter send, Esc or Ctrl+C stop the reply, "
            "Ctrl+L new chat, Ctrl+Q quit."
        ),
    )
    p.add_argument("-m", "--model", type=Path, help="GGUF model file (default: the bundled "
                   "Gemma 3 270M in models/)")
    p.add_argument("-p", "--prompt", help="headless: print the reply to PROMPT on stdout and "
                   "exit (also when a prompt arrives on stdin that is not a terminal)")
    p.add_argument("--system", dest="system_prompt", help="system prompt")
    p.add_argument("--n-ctx", type=_positive_int, default=4096, help="context window in "
                   "tokens (default 4096)")
    p.add_argument("--n-gpu-layers", type=int, default=0, help="layers to offload to the "
                   "GPU; -1 = all (needs a CUDA build: make run CUDA=1). Default 0")
    p.add_argument("--threads", type=_positive_int, default=None, help="CPU threads for "
                   "decoding (default: half the cores)")
    p.add_argument("--n-batch", type=_positive_int, default=256, help="prompt tokens per "
                   "batch; Esc during a prefill is honoured within one batch (default 256)")
    p.add_argument("--chat-format", default=None, help="chat template: gemma, chatml, "
                   "llama3, phi3, plain or jinja (default: the GGUF's template, else by "
                   "architecture)")
    p.add_argument("--max-tokens", type=_positive_int, default=defaults.max_tokens)
    p.add_argument("--temperature", type=_non_negative_float, default=defaults.temperature)
    p.add_argument("--top-p", type=_unit_float, default=defaults.top_p)
    p.add_argument("--top-k", type=int, default=defaults.top_k)
    p.add_argument("--min-p", type=_unit_float, default=defaults.min_p)
    p.add_argument("--repeat-penalty", type=_non_negative_float, default=defaults.repeat_penalty)
    p.add_argument("--seed", type=int, default=defaults.seed, help="-1 = random")
    p.add_argument("--render-interval-ms", type=_positive_int, default=80, help="paint the "
                   "streaming reply every N ms (default 80)")
    p.add_argument("--trace", type=Path, default=None, help="write a JSON-lines timeline of "
                   "every token to FILE")
    return p


def parse_config(argv: Sequence[str]) -> tuple[Config, str | None]:
    """Flags -> (Config, headless prompt or None). Raises :class:`UsageError`."""
    args = build_parser().parse_args(list(argv))
    sampling = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
    )
    config = Config(
        model=args.model,
        n_ctx=args.n_ctx,
        n_gpu_layers=args.n_gpu_layers,
        threads=args.threads,
        n_batch=args.n_batch,
        chat_format=args.chat_format,
        system_prompt=args.system_prompt,
        sampling=sampling,
        render_interval_ms=args.render_interval_ms,
        trace=args.trace,
    )
    return config, args.prompt


def make_engine(config: Config) -> Engine:
    """The llama.cpp engine for ``config`` (checks the model file first).

    Raises:
        EngineError: the model file is missing or not a usable GGUF.
    """
    from tui_chat.engine.llama import LlamaEngine
    from tui_chat.engine.modelfile import check_model_file

    path = config.model or default_model_path()
    if config.model is None and not path.exists():
        raise EngineError(
            f"the default model is not in {path.parent}/: run 'make run' (or 'make model') "
            "to place it, or pass --model PATH"
        )
    check_model_file(path)
    return LlamaEngine(
        path,
        n_ctx=config.n_ctx,
        n_gpu_layers=config.n_gpu_layers,
        n_threads=config.threads,
        n_batch=config.n_batch,
        chat_format=config.chat_format,
    )


def _say(text: str) -> None:
    """One line to stderr; silently nothing if stderr is closed (case C12)."""
    try:
        print(f"tui-chat: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def run_headless(config: Config, engine: Engine, prompt: str) -> int:
    """Stream one reply to stdout as plain, sanitized text. Returns the exit status."""
    from tui_chat.engine.stream import run_stream
    from tui_chat.sanitize import sanitize

    class _StdoutSink:
        def on_prefill(self, event: object, stats: object) -> None:
            pass

        def on_text(self, text: str, stats: object) -> None:
            sys.stdout.write(sanitize(text))
            sys.stdout.flush()

    try:
        engine.load()
    except EngineError as exc:
        _say(str(exc))
        return 2
    messages: list[ChatMessage] = []
    if config.system_prompt:
        messages.append({"role": "system", "content": config.system_prompt})
    messages.append({"role": "user", "content": prompt})
    cancel = CancelToken()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        result = run_stream(engine, messages, config.sampling, cancel, _StdoutSink())
    finally:
        signal.signal(signal.SIGINT, previous)
    sys.stdout.write("\n")
    sys.stdout.flush()
    engine.close()
    if result.reason == "error":
        _say(result.error or "generation failed")
        return 1
    return 130 if result.reason == "cancelled" else 0


def run_tui(config: Config, engine: Engine) -> int:
    """Run the Textual app; returns its exit status (2 if the model failed to load)."""
    from tui_chat.ui.app import make_app

    app = make_app(config, engine)
    app.run()
    code = app.return_code or 0
    if app.load_error:
        _say(app.load_error)
        code = 2
    if not app.engine_thread.join(timeout_s=0.5):
        # The engine is inside a native call (a long prefill or decode step); the
        # terminal is already restored, so leave now rather than wait for it (C07).
        try:
            sys.stdout.flush()
        finally:
            os._exit(code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tui-chat`` command. Returns the exit status."""
    try:
        config, prompt = parse_config(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        _say(f"{exc} (see tui-chat --help)")
        return 2
    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read().strip()
        if not prompt:
            _say("no prompt on stdin")
            return 2
    try:
        engine = make_engine(config)
    except EngineError as exc:
        _say(str(exc))
        return 2
    if prompt is not None:
        return run_headless(config, engine, prompt)
    if not sys.stdout.isatty():
        _say("stdout is not a terminal; use -p PROMPT for plain-text output")
        return 2
    return run_tui(config, engine)
