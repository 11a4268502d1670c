"""Command line: parse flags, then run the TUI or headless mode; ``tui-chat list``,
``export`` and ``trace-report`` are commands of their own. Exit codes:

0 success; 1 a reply failed in headless mode; 2 bad start-up input (flag, model file,
terminal, text that is not UTF-8, stdin over 1 MiB, nothing to ``--resume``); 130
interrupted by Ctrl+C in headless mode.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from tui_chat.config import (
    FLAG_KEYS,
    KEYS,
    Config,
    ConfigError,
    FlagError,
    Key,
    format_config,
    load_config,
)
from tui_chat.engine.base import Engine, EngineError
from tui_chat.engine.stream import TraceFn
from tui_chat.engines import make_engine
from tui_chat.output import ArgumentParser, UsageError, not_utf8, say, silence_output
from tui_chat.paths import (
    default_config_path,
    history_path,
    native_log_path,
)
from tui_chat.sanitize import sanitize
from tui_chat.supervisor import note, supervise

if TYPE_CHECKING:
    from tui_chat.ui.app import ChatApp


class SettingsError(UsageError):
    """A setting from the config file, the environment or a flag is not allowed; the
    message names the key, where it came from and what is allowed."""


# The type functions turn every bad value into ArgumentTypeError: for a ValueError,
# argparse would name the function ("invalid _positive_int value: 'abc'").


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


_UNSET = argparse.SUPPRESS


def _conversation_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a conversation id (tui-chat list shows them), got {text!r}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; ``--help`` names the native log file.

    The flags that set a setting come from :data:`tui_chat.config.KEYS` (its flag, its
    meaning, its default), written once there: they have no default here (a flag not
    given is absent from the result, so the config file and the environment decide),
    and their text is checked by the setting's own rule, as the file's and the
    environment's is (:func:`tui_chat.config.check_flags`). The other flags choose
    what this run does (headless, replay, resume...), not a setting.
    """
    p = ArgumentParser(
        prog="tui-chat",
        description="Chat with a local GGUF model in the terminal (llama.cpp inside).",
        epilog=(
            f"llama.cpp's own log lines never reach the terminal; they are written to "
            f"{sanitize(str(native_log_path()))}. F1 in the app lists every key. "
            "Also: tui-chat list, tui-chat export ID --format md|json, tui-chat cache, "
            "tui-chat trace-report FILE."
        ),
    )
    for key in KEYS.values():
        if key.flag is None:
            continue
        names = ["-m", key.flag] if key.name == "model" else [key.flag]
        if key.switch is not None:  # a flag with no argument: --no-history
            text = (
                f"do not save this chat (saved chats live in {sanitize(str(history_path()))})"
                if key.name == "history"
                else flag_help(key)
            )
            p.add_argument(
                *names, dest=key.name, action="store_const", const=key.switch, default=_UNSET,
                help=text,
            )  # fmt: skip
            continue
        p.add_argument(
            *names, dest=key.name, default=_UNSET, metavar=key.metavar, help=flag_help(key)
        )
    p.add_argument(
        "-p",
        "--prompt",
        help="headless: print the reply to PROMPT on stdout and exit; text piped in on "
        "stdin comes first in the same message (cat main.py | tui-chat -p 'review "
        "this'; at most 1 MiB). Without -p, text on a stdin that is not a terminal is "
        "the prompt",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="headless: write the model's text to stdout exactly as it came, escape "
        "sequences included (default: control characters are made visible, as on screen)",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        type=_conversation_id,
        metavar="ID",
        help="reopen the newest saved conversation, or conversation ID (tui-chat list "
        "shows them); with -p, answer in its context and save the turn to it",
    )
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="FILE",
        help="write a JSON-lines timeline of "
        "every token to FILE (summarise it with: tui-chat trace-report FILE)",
    )
    p.add_argument(
        "--replay",
        type=Path,
        default=None,
        metavar="FILE",
        help="play a --trace "
        "file back through the app instead of a model: reply N of the trace "
        "answers message N",
    )
    p.add_argument(
        "--replay-speed",
        type=_non_negative_float,
        default=1.0,
        metavar="X",
        help="replay time scale: 2 = twice as fast, 0 = no waiting (default 1)",
    )
    p.add_argument(
        "--api-key",
        metavar="KEY",
        help="API key for --api-base (better: TUI_CHAT_API_KEY or OPENAI_API_KEY in the "
        "environment, which the process list does not show)",
    )
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"read settings from FILE instead of {default_config_path()} (a TOML file: "
        "every flag above that sets a setting has a key there; flags win over it)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the settings this run would use (TOML) and where each came from, then exit",
    )
    return p


def flag_help(key: Key) -> str:
    """A setting's ``--help`` line: its meaning and its default (from :class:`Config`)."""
    default = flag_default(key)
    return f"{key.doc} (default {default})" if default is not None else key.doc


def flag_default(key: Key) -> str | None:
    """The default of a setting as text, or None where the meaning says it (None)."""
    value: object = Config()
    for part in key.target.split("."):
        value = getattr(value, part)
    if value is None or value == ():
        return None
    return str(value)


def parse_config(argv: Sequence[str]) -> tuple[Config, str | None]:
    """Flags, environment and config file -> (Config, headless prompt or None).

    Raises:
        UsageError: a bad flag; :class:`SettingsError` for a setting that is not
            allowed (from the config file, the environment or a flag).
    """
    return config_from_args(build_parser().parse_args(list(argv)))


def config_from_args(args: argparse.Namespace) -> tuple[Config, str | None]:
    """Parsed flags, environment and config file -> (Config, headless prompt or None).

    Raises:
        UsageError: a flag's value is not allowed.
        SettingsError: a setting from the config file or the environment is not
            allowed.
    """
    given = vars(args)
    flags = {name: given[name] for name in FLAG_KEYS.values() if name in given}
    try:
        config = load_config(flags, config_file=args.config, api_key=args.api_key)
    except FlagError as exc:
        raise UsageError(str(exc)) from exc  # main() points at --help
    except ConfigError as exc:
        raise SettingsError(str(exc)) from exc
    config.trace = args.trace
    config.resume = args.resume
    config.raw = args.raw
    return config, args.prompt


def run_tui(config: Config, engine: Engine, trace: TraceFn | None = None) -> int:
    """Run the Textual app; returns its exit status (2 if the model failed to load)."""
    from tui_chat.ui.app import make_app

    history = history_path() if config.history else None
    if history is not None:
        note("history", str(history))  # for the supervising parent (tui_chat.supervisor)
    return run_app(make_app(config, engine, trace, history, handle_signals=True))


def _draw_on_stdout_when_stderr_is_not_a_terminal() -> None:
    """Give Textual the terminal on stdout when stderr is closed or redirected.

    Textual draws on ``sys.__stderr__`` (``textual/drivers/linux_driver.py``). With
    stderr closed (``2>&-``, replay case C12) the app drew nothing and ignored every
    key; with ``2>log`` the whole UI went into the file. main() only starts the TUI
    when stdout is a terminal, so draw there; fd 2 stays as the user set it.
    """
    err = sys.__stderr__
    try:
        if err is not None and err.isatty():
            return
    except ValueError:  # a closed stream
        pass
    if not sys.stdout.isatty():
        return
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", errors="replace")
    setattr(sys, "__stderr__", out)  # noqa: B010 (typeshed marks __stderr__ Final)


def run_app(app: ChatApp) -> int:
    """Run a built app to its end and leave within 1 s of a quit (replay case C07).

    Returns the exit status: the app's, or 2 if the model failed to load. When the
    engine thread is still inside a native call after the terminal is restored, the
    process ends with ``os._exit`` instead of returning.
    """
    _draw_on_stdout_when_stderr_is_not_a_terminal()
    # What exists now (every module, the app) lives as long as the process: out of the
    # cyclic collector's reach, so no full pass over it holds the GIL while the first
    # frame is written (one held it back by 50-65 ms on the 2-core machine, issue 16).
    gc.freeze()
    app.run()
    code = app.return_code or 0
    if code == 128 + signal.SIGHUP:
        # The terminal is gone: the interpreter's last flush of stdout and stderr
        # would fail (EIO) and turn the exit status into 120.
        silence_output(1, 2)
    if app.load_error:
        say(app.load_error)
        code = 2
    if not app.session.join(timeout_s=0.25):
        # The engine is inside a native call (a long prefill or decode step); the
        # terminal is already restored, so leave now rather than wait for it (C07).
        try:
            sys.stdout.flush()
        finally:
            os._exit(code)
    return code


def run() -> None:
    """Entry point of the ``tui-chat`` command: :func:`main` under the supervising
    parent (:mod:`tui_chat.supervisor`), which puts the terminal back if native code
    ends the app with a signal."""
    sys.exit(supervise(main))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tui-chat`` command. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "trace-report":
        from tui_chat.tracing.report import trace_report_main

        return trace_report_main(argv[1:])
    if argv and argv[0] == "cache":
        from tui_chat.history.kvcache import SnapshotCache, cache_main

        try:
            limit_bytes = load_config().kv_cache_limit_bytes  # config file, environment
        except ConfigError as exc:
            say(str(exc))
            return 2
        return cache_main(argv[1:], SnapshotCache(limit_bytes=limit_bytes))
    if argv and argv[0] in ("list", "export"):
        from tui_chat.history.cli import export_main, list_main

        return (list_main if argv[0] == "list" else export_main)(argv[1:])
    try:
        args = build_parser().parse_args(argv)  # once: 2 ms a build (issue 16)
        config, prompt = config_from_args(args)
    except SettingsError as exc:
        say(str(exc))
        return 2
    except UsageError as exc:
        say(f"{exc} (see tui-chat --help)")
        return 2
    # Text in another encoding arrives as lone surrogates (the settings' own check
    # catches --system and the others): say so here, not as an "engine error" later.
    for flag, text in (("-p", prompt), ("--api-key", args.api_key)):
        if text is not None and (bad := not_utf8(text)) is not None:
            say(f"{flag}: not UTF-8 text ({bad} is not; is the terminal set to UTF-8?)")
            return 2
    # --replay and --replay-speed stay out of Config: they choose the engine, they are
    # not settings of a run.
    replay_path, replay_speed = args.replay, args.replay_speed
    if args.print_config:
        return _print_config(config)
    if replay_path is not None:
        config.history = False  # a replay reproduces a session; it is not a new chat
    try:
        # The model is checked first: a wrong --model is the error to report, whatever
        # stdin holds.
        if replay_path is None:
            engine = make_engine(config)
        else:
            engine = _replay_engine(replay_path, replay_speed)
    except EngineError as exc:
        say(str(exc))
        return 2
    stdin = _piped_stdin()
    if stdin is not None:
        from tui_chat.headless import InputError, join_prompt, read_stdin

        try:
            piped = read_stdin(stdin)
        except InputError as exc:
            say(str(exc))
            return 2
        if prompt is None and not piped.strip():
            say("no prompt on stdin")
            return 2
        prompt = join_prompt(piped, prompt)
    if prompt is not None and not prompt.strip():
        say("the prompt is empty")
        return 2
    resume: int | None = None
    if prompt is not None and config.resume is not False:
        from tui_chat.headless import InputError, resume_target

        try:
            resume = resume_target(config, history_path())
        except InputError as exc:
            say(str(exc))
            return 2
    if prompt is None and not sys.stdout.isatty():
        say("stdout is not a terminal; use -p PROMPT for plain-text output")
        return 2
    # For the supervising parent, should the app die of a signal (tui_chat.supervisor).
    if config.api_base is None and replay_path is None:
        note("log", str(native_log_path()))
    tracer = None
    if config.trace is not None:
        from tui_chat.tracing.recorder import Tracer

        try:
            tracer = Tracer(config.trace)
        except OSError as exc:
            say(f"cannot write the trace file: {exc}")
            return 2
    try:
        if prompt is not None:
            from tui_chat.headless import run_headless

            return run_headless(
                config, engine, prompt, tracer, history=history_path(), resume=resume
            )
        return run_tui(config, engine, tracer)
    finally:
        if tracer is not None:
            tracer.close()


def _piped_stdin() -> BinaryIO | None:
    """stdin's bytes when it is not a terminal (a pipe, a file, /dev/null); None for a
    terminal, or for no stdin at all (``0<&-``, or a stand-in without a file
    descriptor, as pytest's capture is)."""
    stream = sys.stdin
    try:
        if stream is None or stream.isatty():
            return None
        stream.fileno()
    except (OSError, ValueError):  # closed, or not a file
        return None
    return getattr(stream, "buffer", None)


def _print_config(config: Config) -> int:
    """``--print-config``: the merged settings on stdout (a quiet exit when its reader
    has gone, as for ``-p``: replay case C28)."""
    try:
        sys.stdout.write(format_config(config))
        sys.stdout.flush()
    except BrokenPipeError:
        silence_output(1)
        return 128 + signal.SIGPIPE
    return 0


def _replay_engine(path: Path, speed: float) -> Engine:
    """A :class:`~tui_chat.tracing.replay.ReplayEngine`; bad files become EngineError."""
    from tui_chat.tracing.reader import TraceFormatError
    from tui_chat.tracing.replay import ReplayEngine

    try:
        return ReplayEngine.from_file(path, speed=speed)
    except (OSError, TraceFormatError) as exc:
        raise EngineError(f"cannot replay {path}: {exc}") from exc
