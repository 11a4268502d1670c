"""Typed settings for one run of tui-chat: defaults < config file < environment < flags.

Every setting is a :class:`Key` in :data:`KEYS`: its name in the config file (TOML,
``$XDG_CONFIG_HOME/tui-chat/config.toml``, read with the standard library's
``tomllib``), its environment variable (``TUI_CHAT_`` + the key in capitals), its
flag, its default and what values it allows. :func:`load_config` merges the four layers
and records where each value came from (:attr:`Config.origins`, printed by
``tui-chat --print-config``).

The config file is untrusted input like any other file (issue 8): its size, its
encoding, each value's type and range and each string's length are checked where the
file is read; a bad value stops the start with one line that names the key, the file
and what is allowed (:class:`ConfigError`, exit status 2); a key we do not know is
refused too, with the nearest known key: a misspelt key that was silently skipped
would leave its default in force without a word (``n_gpu_layer = -1`` running on the
CPU is replay case C39's complaint again).

The API key is never read from the config file: config files get copied between
machines, kept in dotfile repositories and pasted into bug reports (``--print-config``
output above all). It comes from ``--api-key`` or the environment
(:data:`API_KEY_VARIABLES`).

Per-conversation settings (:class:`ChatSettings`: the system prompt and sampling) are
checked with the same rules when they are read back from the history database.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui_chat.engine.base import SamplingParams
from tui_chat.engine.templates import template_names
from tui_chat.output import not_utf8
from tui_chat.paths import default_config_path


def default_threads() -> int:
    """Decode threads when ``threads`` is not set: the physical cores this process may
    run on (its CPU affinity, which containers and ``taskset`` narrow), as llama.cpp's
    own tools default to. Hyper-threads are not counted: two decode threads on one
    core's two hyper-threads are slower than one (llama.cpp ``cpu_get_num_math``).

    llama-cpp-python's own default is half the logical CPUs: one thread on a 2-core
    machine, 63 % of the machine's decode speed with SmolLM2 (issue 16). More threads
    do not cost the frames: ``make bench``'s group ``native`` measures decode, loop lag
    and key echo at every thread count (README, "Benchmark").
    """
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    n_logical = len(allowed) if allowed else (os.cpu_count() or 1)
    cores: set[tuple[str, str]] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu, physical = None, "0"
            for line in f:
                name, _, value = line.partition(":")
                name, value = name.strip(), value.strip()
                if name == "processor":
                    cpu, physical = int(value), "0"
                elif name == "physical id":
                    physical = value
                elif name == "core id" and (allowed is None or cpu in allowed):
                    cores.add((physical, value))
    except (OSError, ValueError):
        cores = set()
    return max(1, min(len(cores), n_logical) if cores else n_logical)


@dataclass
class Config:
    """Everything the app and the engine need to start.

    Attributes:
        model: GGUF path; None means the bundled default model.
        n_ctx: context window in tokens.
        n_gpu_layers: layers offloaded to the GPU; -1 = all (CUDA build).
        threads: CPU threads for decode; None = :func:`default_threads`.
        n_batch: prompt tokens per batch (also the prefill cancel granularity).
        chat_format: chat template override, or None for automatic.
        system_prompt: optional system message.
        sampling: sampling settings.
        render_interval_ms: paint timer period in milliseconds (60-100 recommended).
        show_thinking: show the thinking of every reply expanded (a reasoning model's);
            False shows each as one line once its answer starts. Ctrl+T changes it and
            writes it back to the config file.
        notify: a reply that took at least :attr:`notify_after_s` and ends while the
            terminal does not have the focus sends a desktop notification through the
            terminal (:mod:`tui_chat.ui.notify`); never with ``-p``.
        notify_after_s: the shortest reply, in seconds from its start (the prefill) to
            its end, that :attr:`notify` tells about.
        escape_delay_ms: how long an ESC waits for the key it may start (Alt+Enter is
            ESC then CR), in ms; None: 300 over ssh, else 100
            (:func:`tui_chat.ui.driver.escape_delay_s`).
        trace: JSON-lines timeline file (``--trace``), or None.
        history: save conversations to the history database.
        resume: reopen a saved conversation: True for the newest (``--resume``), a
            conversation id (``--resume ID``), False for none.
        raw: headless output passes the model's text through unsanitized (``--raw``).
        api_base: an OpenAI-compatible server's API root (``--api-base``); set, it
            replaces the embedded llama.cpp engine.
        api_key: the server's API key (``--api-key`` or the environment, see
            :func:`api_key_from_env`). Kept out of ``repr``; never stored or logged.
        api_model: the server's model to use; None = the first it lists.
        api_timeout_s: longest wait for the server's next token, in seconds (the wait
            for the first includes the server's prefill).
        model_dirs: folders the model picker lists GGUF files from, besides ``models/``.
        kv_cache_limit_mb: most disk the KV snapshot cache may use, in MiB
            (2**20 bytes); 0 keeps no snapshots.
        origins: where each key's value came from: ``default``, the config file's
            path, an environment variable's name or a flag (``--print-config``).
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
    show_thinking: bool = False
    notify: bool = True
    notify_after_s: float = 5.0
    escape_delay_ms: int | None = None
    trace: Path | None = None
    history: bool = True
    resume: bool | int = False
    raw: bool = False
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_model: str | None = None
    api_timeout_s: float = 60.0
    model_dirs: tuple[Path, ...] = ()
    kv_cache_limit_mb: int = 2048
    origins: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def kv_cache_limit_bytes(self) -> int:
        """:attr:`kv_cache_limit_mb` in bytes."""
        return self.kv_cache_limit_mb * 1024 * 1024


API_KEY_VARIABLES = ("TUI_CHAT_API_KEY", "OPENAI_API_KEY")
"""Environment variables that hold the server's API key, the first set one wins
(``OPENAI_API_KEY`` is the name OpenAI's own clients read)."""

ENV_PREFIX = "TUI_CHAT_"
"""A key's environment variable is this prefix and the key in capitals
(``TUI_CHAT_N_CTX``)."""

MAX_CONFIG_FILE_BYTES = 1024 * 1024
"""A config file larger than this is refused (bytes): real ones are a few hundred."""
MAX_PATH_CHARS = 4096
"""Longest path accepted in a setting (Linux's PATH_MAX)."""
MAX_SYSTEM_PROMPT_CHARS = 256 * 1024
"""Longest system prompt accepted (characters): far above any real one."""
MAX_MODEL_DIRS = 64
"""Most folders ``model_dirs`` may name."""
MAX_SETTINGS_JSON_CHARS = 2 * MAX_SYSTEM_PROMPT_CHARS
"""Longest per-conversation settings row read back from the history (characters)."""


def api_key_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from the environment (:data:`API_KEY_VARIABLES`), or None.

    The key goes to whatever server ``--api-base`` names.
    """
    env = os.environ if environ is None else environ
    return next((env[name] for name in API_KEY_VARIABLES if env.get(name)), None)


class ConfigError(Exception):
    """A setting cannot be used; the message is one line (the exit status is 2).

    It names the key, where the value came from (the file, the environment variable or
    the flag) and what is allowed. Values from a file are quoted escaped and cut short,
    and the line still goes through the sanitiser (:func:`tui_chat.output.say`).
    """


class FlagError(ConfigError):
    """A flag's value is not allowed (the command line, not a file: ``--help`` says
    what each flag takes)."""


class _Bad(Exception):
    """A value is not allowed; ``str(exc)`` says what is ("must be ...")."""


# --------------------------------------------------------------------- the keys


def _shown(value: object, limit: int = 60) -> str:
    """A value from a file, environment or flag, quoted for an error line: JSON
    escapes control characters, and it is cut to ``limit`` characters."""
    import json  # here, not at import: 1.5 ms the first frame does not need (issue 16)

    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, Path):
        text = json.dumps(str(value), ensure_ascii=True)
    elif isinstance(value, int | str | list | dict):
        try:
            text = json.dumps(value, ensure_ascii=True, default=str)
        except ValueError:  # a nested structure too deep
            text = type(value).__name__
    else:
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _int_in(lo: int, hi: int, what: str = "") -> Callable[[object], int]:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise _Bad(f"must be a whole number from {lo} to {hi}{what}")
        return value

    return check


def _float_in(lo: float, hi: float, what: str = "") -> Callable[[object], float]:
    def check(value: object) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        number = float(value) if ok else math.nan  # type: ignore[arg-type]
        if not lo <= number <= hi:  # False for NaN too
            raise _Bad(f"must be a number from {lo:g} to {hi:g}{what}")
        return number

    return check


def _float_above(lo: float, what: str = "") -> Callable[[object], float]:
    def check(value: object) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        number = float(value) if ok else math.nan  # type: ignore[arg-type]
        if not (math.isfinite(number) and number > lo):
            raise _Bad(f"must be more than {lo:g}{what}")
        return number

    return check


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad("must be true or false")
    return value


def _text(max_chars: int, *, one_line: bool = True, utf8: bool = True) -> Callable[[object], str]:
    def check(value: object) -> str:
        if not isinstance(value, str):
            raise _Bad("must be a string")
        if len(value) > max_chars:
            raise _Bad(f"must be a string of at most {max_chars} characters")
        if "\x00" in value or (one_line and any(ord(c) < 0x20 or c == "\x7f" for c in value)):
            raise _Bad("must be a string without control characters")
        # A flag or variable in another encoding (issue 20): say so now, not as an
        # "engine error" when the model gets the text.
        if utf8 and (bad := not_utf8(value)) is not None:
            raise _Bad(f"must be UTF-8 text ({bad} is not; is the terminal set to UTF-8?)")
        return value

    return check


def _choice(names: Sequence[str]) -> Callable[[object], str]:
    def check(value: object) -> str:
        if not isinstance(value, str) or value not in names:
            raise _Bad(f"must be one of {', '.join(names)}")
        return value

    return check


def _url(value: object) -> str:
    text = _text(2048)(value)
    if not text.startswith(("http://", "https://")) or any(c.isspace() for c in text):
        raise _Bad("must be an http:// or https:// URL (the server's API root)")
    return text


def _path(value: object) -> Path:
    # Any character but NUL is legal in a POSIX file name; a path is shown sanitized.
    # A file name in another encoding is legal too: the OS gets its bytes back.
    return Path(_text(MAX_PATH_CHARS, one_line=False, utf8=False)(value)).expanduser()


def _paths(value: object) -> tuple[Path, ...]:
    if not isinstance(value, list) or len(value) > MAX_MODEL_DIRS:
        raise _Bad(f"must be a list of at most {MAX_MODEL_DIRS} folder paths (strings)")
    try:
        return tuple(_path(item) for item in value)
    except _Bad as exc:
        raise _Bad(f"must be a list of folder paths: each {exc}") from None


@dataclass(frozen=True)
class Key:
    """One setting.

    Attributes:
        name: the key in the config file (and, in capitals after :data:`ENV_PREFIX`,
            its environment variable).
        check: turns a value as TOML gives it into the setting's value; raises
            ``_Bad`` ("must be ...") for anything else.
        doc: what it means, with its unit.
        flag: the command-line flag that sets it, or None.
        attr: the :class:`Config` attribute (``sampling.top_p`` for sampling).
        from_text: turns an environment variable's or a flag's text into a TOML-like
            value before ``check`` (default: the text itself).
        metavar: the flag's argument in ``--help`` (``N``, ``PATH``...).
        switch: for a flag that takes no argument, the value it sets
            (``--no-history``: False; ``--show-thinking``: True); None otherwise.
    """

    name: str
    check: Callable[[object], Any]
    doc: str
    flag: str | None = None
    attr: str = ""
    from_text: Callable[[str], object] | None = None
    metavar: str | None = None
    switch: bool | None = None

    @property
    def env(self) -> str:
        """Its environment variable."""
        return ENV_PREFIX + self.name.upper()

    @property
    def target(self) -> str:
        return self.attr or self.name


def _number_text(text: str) -> object:
    """An environment variable's number: int if it reads as one, else float, else text
    (which the check then refuses, quoting it)."""
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:
            pass
    return text


def _bool_text(text: str) -> object:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    return text


def _list_text(text: str) -> object:
    return [part for part in text.split(os.pathsep) if part]


KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key("model", _path, "GGUF model file (default: the bundled SmolLM2 135M Instruct in "
            "models/)", "--model", metavar="PATH"),
        Key("model_dirs", _paths, "more folders the model picker (F3) lists .gguf files from, "
            "besides models/", None, from_text=_list_text),
        Key("n_ctx", _int_in(1, 1 << 24, " (tokens)"), "context window in tokens (the "
            "default is lowered to what the model was trained for; more than that is kept, "
            "and said)", "--n-ctx", from_text=_number_text, metavar="N"),
        Key("n_gpu_layers", _int_in(-1, 100_000, "; -1 = all"),
            "layers offloaded to the GPU, -1 = all (needs a CUDA build: make run CUDA=1)",
            "--n-gpu-layers", from_text=_number_text, metavar="N"),
        Key("threads", _int_in(1, 1024), "CPU threads for decoding (default: the physical cores)",
            "--threads", from_text=_number_text, metavar="N"),
        Key("n_batch", _int_in(1, 1 << 20, " (tokens)"), "prompt tokens per batch; Esc during a "
            "prefill is honoured within one batch", "--n-batch", from_text=_number_text,
            metavar="N"),
        Key("chat_format", _choice(template_names()), "chat template: "
            f"{', '.join(template_names())} (default: the GGUF's template, else by "
            "architecture)", "--chat-format", metavar="NAME"),
        Key("system_prompt", _text(MAX_SYSTEM_PROMPT_CHARS, one_line=False),
            "system prompt of new conversations", "--system", metavar="TEXT"),
        Key("max_tokens", _int_in(1, 1 << 24, " (tokens)"), "most tokens per reply",
            "--max-tokens", "sampling.max_tokens", _number_text, "N"),
        Key("temperature", _float_in(0, 10), "sampling temperature, 0 = greedy",
            "--temperature", "sampling.temperature", _number_text, "T"),
        Key("top_p", _float_in(0, 1), "nucleus sampling mass", "--top-p", "sampling.top_p",
            _number_text, "P"),
        Key("top_k", _int_in(0, 1 << 20, "; 0 disables"), "keep the k most likely tokens",
            "--top-k", "sampling.top_k", _number_text, "K"),
        Key("min_p", _float_in(0, 1), "drop tokens below min_p x the top probability",
            "--min-p", "sampling.min_p", _number_text, "P"),
        Key("repeat_penalty", _float_in(0, 10, "; 1 disables"),
            "penalty for recently seen tokens, 1 disables", "--repeat-penalty",
            "sampling.repeat_penalty", _number_text, "R"),
        Key("seed", _int_in(-1, 2**32 - 1, "; -1 = random"), "sampler seed, -1 = random",
            "--seed", "sampling.seed", _number_text, "N"),
        Key("reasoning_budget", _int_in(-1, 1 << 24, "; -1 = no limit"),
            "most thinking tokens per reply (then the engine closes the thinking), -1 = no "
            "limit", "--reasoning-budget", "sampling.reasoning_budget", _number_text, "N"),
        Key("thinking", _choice(["auto", "on", "off"]), "a reasoning model's thinking: auto "
            "(the chat template's default), on or off (its enable_thinking)", "--thinking",
            "sampling.thinking", metavar="auto|on|off"),
        Key("reasoning_effort", _choice(["default", "low", "medium", "high"]), "how hard a "
            "reasoning model thinks, where its template reads reasoning_effort (gpt-oss): "
            "default, low, medium or high", "--reasoning-effort", "sampling.reasoning_effort",
            metavar="LEVEL"),
        Key("render_interval_ms", _int_in(1, 10_000, " (ms)"),
            "how often the streaming reply is painted (ms)", "--render-interval-ms",
            from_text=_number_text, metavar="N"),
        Key("show_thinking", _bool, "show the thinking of replies expanded (Ctrl+T in the "
            "app changes it and saves it here); with -p, write the thinking to stderr",
            "--show-thinking", from_text=_bool_text, switch=True),
        Key("notify", _bool, "a desktop notification through the terminal (OSC 777, OSC 99 "
            "or OSC 9; a bell where none is known) when a reply that took notify_after_s "
            "or more ends while the terminal is not focused", None, from_text=_bool_text),
        Key("notify_after_s", _float_in(0, 86_400, " (s)"), "the shortest reply (seconds, "
            "from its start, the prefill, to its end) that notify tells about", None,
            from_text=_number_text),
        Key("escape_delay_ms", _int_in(1, 5000, " (ms)"), "how long Esc waits for a key "
            "it may start (Alt+Enter arrives as ESC, then CR), in ms (default: 300 over ssh, "
            "where the two can come a round trip apart; else 100)", None,
            from_text=_number_text),
        Key("history", _bool, "save conversations (false: like --no-history)", "--no-history",
            from_text=_bool_text, switch=False),
        Key("api_base", _url, "chat with a model on an OpenAI-compatible server instead of "
            "the embedded llama.cpp: its API root, e.g. http://127.0.0.1:8080/v1 "
            "(llama-server, vLLM, Ollama, llama_cpp.server)", "--api-base", metavar="URL"),
        Key("api_model", _text(256), "the server's model (default: the first it lists)",
            "--api-model", metavar="NAME"),
        Key("api_timeout_s", _float_above(0, " s"),
            "give a reply up when the server sends no text for this long (seconds; the "
            "first token waits for the server's prefill)", "--api-timeout",
            from_text=_number_text, metavar="S"),
        Key("kv_cache_limit_mb", _int_in(0, 1 << 24, " (MiB)"),
            "most disk the KV snapshot cache may use (MiB), 0 = no snapshots", None,
            from_text=_number_text),
    )
}  # fmt: skip
"""Every setting of the config file, in the order ``--print-config`` shows them."""

FLAG_KEYS: dict[str, str] = {k.flag: k.name for k in KEYS.values() if k.flag}
"""Flag -> key (``--no-history`` sets ``history`` to false)."""

_NOT_IN_FILE = {
    "api_key": "the API key is never read from a config file (config files get shared "
    "and pasted); set TUI_CHAT_API_KEY or OPENAI_API_KEY in the environment, or pass "
    "--api-key",
}


# ------------------------------------------------------------------- the layers


def read_config_file(path: Path, *, must_exist: bool) -> dict[str, Any]:
    """The checked values of a config file, by key (paths made absolute).

    Args:
        path: the TOML file.
        must_exist: True for a file the user named (``--config``); the default file
            may be missing.

    Returns:
        key -> checked value; empty when the default file does not exist.

    Raises:
        ConfigError: unreadable, too large, not UTF-8, not TOML, an unknown key, a
            value of the wrong type or out of range.
    """
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_FILE_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):
        if must_exist:
            raise ConfigError(f"config file not found: {path}") from None
        return {}
    except IsADirectoryError:
        raise ConfigError(f"the config file {path} is a directory") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_FILE_BYTES:
        raise ConfigError(
            f"the config file {path} is larger than {MAX_CONFIG_FILE_BYTES // 1024} KiB; "
            "is it the right file?"
        )
    try:
        # utf-8-sig: a byte-order mark (Notepad writes one) is skipped, not a TOML error.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the config file {path} is not UTF-8 text (byte {exc.start})") from None
    import tomllib  # only when there is a file: 3 ms before the first frame (issue 16)

    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the config file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"the config file {path} nests too deeply") from None
    values: dict[str, Any] = {}
    for name, raw in table.items():
        key = KEYS.get(name)
        if key is None:
            raise ConfigError(f"{path}: {_unknown(name)}")
        try:
            value = key.check(raw)
        except _Bad as exc:
            raise ConfigError(f"{path}: {name} {exc}, got {_shown(raw)}") from None
        values[name] = _relative_to(value, path.parent)
    return values


def _unknown(name: str) -> str:
    if name in _NOT_IN_FILE:
        return _NOT_IN_FILE[name]
    close = difflib.get_close_matches(name, list(KEYS), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (
        f"unknown key {_shown(name)}{hint}; the keys are listed by tui-chat --print-config "
        "and in the README"
    )


def _relative_to(value: Any, folder: Path) -> Any:
    """Paths in a config file are relative to the file's folder."""
    if isinstance(value, Path):
        return value if value.is_absolute() else folder / value
    if isinstance(value, tuple):
        return tuple(_relative_to(v, folder) for v in value)
    return value


def read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """Checked values of the ``TUI_CHAT_<KEY>`` variables that are set, by key.

    Raises:
        ConfigError: a value that is not allowed (the line names the variable).
    """
    values: dict[str, Any] = {}
    for key in KEYS.values():
        text = environ.get(key.env)
        if text is None or text == "":
            continue
        raw = key.from_text(text) if key.from_text else text
        try:
            values[key.name] = key.check(raw)
        except _Bad as exc:
            raise ConfigError(
                f"{key.env} (environment): {key.name} {exc}, got {_shown(text)}"
            ) from None
    return values


def check_flags(flags: Mapping[str, object]) -> dict[str, Any]:
    """Check values given as flags, by key, with the rules the file and the environment
    are checked with: a flag's text goes through ``from_text`` as an environment
    variable's does (``--no-history`` gives ``history`` as False).

    Raises:
        FlagError: a value that is not allowed (``--n-ctx must be a whole number from
            1 to 16777216 (tokens), got "abc"``).
    """
    values: dict[str, Any] = {}
    for name, given in flags.items():
        key = KEYS[name]
        raw = key.from_text(given) if isinstance(given, str) and key.from_text else given
        try:
            values[name] = key.check(str(raw) if isinstance(raw, Path) else raw)
        except _Bad as exc:
            raise FlagError(f"{key.flag} {exc}, got {_shown(given)}") from None
    return values


def load_config(
    flags: Mapping[str, object] | None = None,
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    api_key: str | None = None,
) -> Config:
    """Merge defaults < config file < environment < flags into a :class:`Config`.

    Args:
        flags: key -> value for each setting given on the command line (``history``
            false for ``--no-history``); values typed as the parser gives them.
        config_file: a file the user named (``--config``): it must exist. None reads
            :func:`default_config_path` if it exists.
        environ: the environment (default ``os.environ``).
        api_key: ``--api-key``, which wins over the environment's key.

    Returns:
        The settings, with :attr:`Config.origins` saying where each came from.

    Raises:
        ConfigError: one line naming the key, its source and what is allowed; also
            when one layer sets both ``model`` and ``api_base``.
    """
    env = os.environ if environ is None else environ
    path = config_file if config_file is not None else default_config_path()
    layers: list[tuple[dict[str, Any], Callable[[Key], str]]] = [
        (read_config_file(path, must_exist=config_file is not None), lambda k: str(path)),
        (read_environment(env), lambda k: k.env),
        (check_flags(flags or {}), lambda k: k.flag or k.name),
    ]
    config = Config()
    origins = {name: "default" for name in KEYS}
    for values, origin in layers:
        if "model" in values and "api_base" in values:
            where = origin(KEYS["model"])
            if where.startswith("--"):
                raise ConfigError(
                    "--model and --api-base exclude each other: the server loads the model "
                    "(choose among its models with --api-model)"
                )
            raise ConfigError(
                f"{where}: model and api_base exclude each other (set one: a local GGUF, or a "
                "server)"
            )
        for name, value in values.items():
            _assign(config, KEYS[name], value)
            origins[name] = origin(KEYS[name])
        # A higher layer's choice of engine replaces a lower one's.
        if "model" in values:
            config.api_base = None
            origins["api_base"] = "default"
        if "api_base" in values:
            config.model = None
            origins["model"] = "default"
    config.api_key = api_key or api_key_from_env(env)
    origins["api_key"] = (
        "--api-key"
        if api_key
        else next((name for name in API_KEY_VARIABLES if env.get(name)), "default")
    )
    origins["config_file"] = str(path)
    config.origins = origins
    return config


def _assign(config: Config, key: Key, value: Any) -> None:
    if key.target.startswith("sampling."):
        attr = key.target.split(".", 1)[1]
        config.sampling = dataclasses.replace(config.sampling, **{attr: value})
    else:
        setattr(config, key.target, value)


# --------------------------------------------------------------- --print-config


def _toml_string(text: str) -> str:
    """A TOML basic string; control, bidi and non-printable characters escaped, so the
    line is inert on a terminal and reads back as the same text."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20 or 0x7F <= code <= 0x9F or not ch.isprintable():
            out.append(f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: object) -> str:
    """``value`` written as TOML (bool, int, finite float, str, Path, or a sequence of
    those)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return _toml_string(str(value))
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def format_config(config: Config) -> str:
    """The merged settings as a TOML document, each line commented with its origin.

    It reads back as a config file (``tui-chat --print-config > config.toml``);
    settings that are not set are commented out. The API key is never printed: only
    whether it is set and where from.
    """
    origins = config.origins
    path = origins.get("config_file", str(default_config_path()))
    lines = [
        "# tui-chat settings: defaults < config file < environment (TUI_CHAT_<KEY>) < flags",
        f"# config file: {_toml_string(path)}" + ("" if Path(path).is_file() else " (not found)"),
    ]
    body: list[tuple[str, str]] = []
    for key in KEYS.values():
        value = _value_of(config, key)
        origin = origins.get(key.name, "default")
        if value is None:
            body.append((f"# {key.name} = (not set)", origin))
        else:
            body.append((f"{key.name} = {toml_value(value)}", origin))
    key_origin = origins.get("api_key", "default")
    if config.api_key:
        body.append(("# api_key = (set, never printed)", key_origin))
    else:
        body.append(("# api_key = (not set)", "default"))
    width = min(60, max(len(text) for text, _ in body))
    for text, origin in body:
        shown = origin if origin == "default" else _origin_text(origin)
        lines.append(f"{text.ljust(width)}  # {shown}")
    return "\n".join(lines) + "\n"


def _origin_text(origin: str) -> str:
    if origin.startswith("--"):
        return f"flag {origin}"
    if origin.startswith(ENV_PREFIX) or origin in API_KEY_VARIABLES:
        return f"environment {origin}"
    return f"file {_toml_string(origin)}"


def _value_of(config: Config, key: Key) -> Any:
    obj: Any = config
    for part in key.target.split("."):
        obj = getattr(obj, part)
    return obj


# ------------------------------------------------------ per-conversation settings


@dataclass(frozen=True)
class ChatSettings:
    """A conversation's own settings: its system prompt and sampling.

    Edited in the settings screen, saved with the conversation (the history's
    ``conversation_settings`` table, as JSON) and applied from the next reply on.

    Attributes:
        system_prompt: the system message; None or "" for none.
        sampling: sampling settings for its replies.
    """

    system_prompt: str | None
    sampling: SamplingParams

    @classmethod
    def of(cls, config: Config) -> ChatSettings:
        """The settings a new conversation starts with: the run's."""
        return cls(config.system_prompt, config.sampling)

    def to_json(self) -> str:
        """The JSON saved in the history (keys as in the config file)."""
        import json  # as in _shown

        data: dict[str, Any] = {"system_prompt": self.system_prompt or ""}
        data.update(dataclasses.asdict(self.sampling))
        return json.dumps(data, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: object, fallback: ChatSettings) -> tuple[ChatSettings, list[str]]:
        """Read settings saved by :meth:`to_json` (an untrusted history row).

        Each value is checked with the config file's rules; a value that fails, or a
        row that is not a JSON object, leaves ``fallback``'s value.

        Returns:
            The settings and one line per value that was not used.
        """
        import json  # as in _shown

        if not isinstance(text, str) or len(text) > MAX_SETTINGS_JSON_CHARS:
            return fallback, ["the saved settings of this conversation are not readable"]
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            return fallback, ["the saved settings of this conversation are not readable"]
        problems: list[str] = []
        system_prompt = fallback.system_prompt
        if "system_prompt" in data:
            try:
                system_prompt = KEYS["system_prompt"].check(data["system_prompt"]) or None
            except _Bad as exc:
                problems.append(f"saved system_prompt {exc}")
        sampling: dict[str, Any] = {}
        for f in dataclasses.fields(SamplingParams):
            if f.name in data:
                try:
                    sampling[f.name] = KEYS[f.name].check(data[f.name])
                except _Bad as exc:
                    problems.append(f"saved {f.name} {exc}, got {_shown(data[f.name])}")
        return cls(system_prompt, dataclasses.replace(fallback.sampling, **sampling)), problems


def check_setting(name: str, value: object) -> Any:
    """Check one value with the rules of key ``name`` (the settings screen's fields).

    Returns:
        The value as the setting holds it.

    Raises:
        ValueError: not allowed; the message is "must be ...".
    """
    try:
        return KEYS[name].check(value)
    except _Bad as exc:
        raise ValueError(str(exc)) from None
