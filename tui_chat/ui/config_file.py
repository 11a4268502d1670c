"""Settings the app changes itself, written back to the config file (``show_thinking``,
which Ctrl+T changes: issue 18).

Until this, no setting was ever written: the config file was the user's alone
(:mod:`tui_chat.config` reads it). A write here changes one line, ``key = value``, or
adds it at the end, and keeps every other line, comment and blank as it was. It first
reads the file as :func:`~tui_chat.config.read_config_file` does (a file the app would
refuse at the next start is left alone), and checks that the new text reads back as the
old settings with that one key changed before it replaces the file (atomically: a
crash leaves the old file or the new one, never half of one).
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path

from tui_chat.config import (
    KEYS,
    MAX_CONFIG_FILE_BYTES,
    Config,
    ConfigError,
    check_setting,
    read_config_file,
    toml_value,
)
from tui_chat.paths import default_config_path

_WRITING = threading.Lock()
"""One write at a time: each writes the value the setting holds when it runs, so the
last write is of the last change."""


def config_file_of(config: Config) -> Path:
    """The config file of the run: the one it read (``--config FILE``, else the
    default file, which need not exist yet)."""
    named = config.origins.get("config_file")
    return Path(named) if named else default_config_path()


def save_setting(config: Config, name: str) -> Path:
    """Write the value setting ``name`` holds in ``config`` to the run's config file.

    Runs on a thread of its own (file I/O stays off the event loop).

    Args:
        config: the run's settings (the value is read from it when the write runs).
        name: a key of :data:`~tui_chat.config.KEYS` (not a sampling setting).

    Returns:
        The file written.

    Raises:
        ConfigError: the file is one the app would refuse (not TOML, a bad value...),
            or the line could not be changed alone.
        OSError: the file or its folder cannot be written.
    """
    path = config_file_of(config)
    with _WRITING:
        value = check_setting(name, getattr(config, KEYS[name].target))
        read_config_file(path, must_exist=False)  # refuses a file it would not start with
        try:
            # As read_config_file reads it: a byte-order mark is skipped (and not
            # written back; TOML files are UTF-8 without one).
            old = path.read_bytes()[: MAX_CONFIG_FILE_BYTES + 1].decode("utf-8-sig")
        except FileNotFoundError:
            old = ""
        new = with_setting(old, name, value)
        if new != old:
            _replace(path, new)
    return path


def with_setting(text: str, name: str, value: object) -> str:
    """The TOML ``text`` of a config file with key ``name`` set to ``value``: its line
    changed in place, or added at the end.

    Raises:
        ConfigError: the result does not read back as ``text``'s settings with that one
            key changed (the key's line is inside a multi-line string, say).
    """
    import tomllib

    line = f"{name} = {toml_value(value)}"
    assignment = re.compile(rf"^[ \t]*{re.escape(name)}[ \t]*=.*$", re.MULTILINE)
    new, n_changed = assignment.subn(lambda _: line, text, count=1)
    if not n_changed:
        new = text + ("\n" if text and not text.endswith("\n") else "") + line + "\n"
    try:
        ok = tomllib.loads(new) == {**tomllib.loads(text), name: value}
    except tomllib.TOMLDecodeError:
        ok = False
    if not ok:
        raise ConfigError(f"cannot set {name} in the config file without rewriting it")
    return new


def _replace(path: Path, text: str) -> None:
    """Write ``path`` anew: a file beside it, then renamed over it (keeping its mode;
    a symbolic link, as dotfile repositories make, stays one: its target is written)."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    fd, temp = tempfile.mkstemp(prefix=".config-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
