"""Settings: defaults < config file < environment < flags, provenance, bad values.

Issue 11 part 4 (the config file) and issue 8 part 2 (a file is untrusted: types, sizes
and strings are checked where it is read). Every bad value must stop the start with
one line that names the key, the file (or variable, or flag) and what is allowed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.e2e.terminal import app_env
from tests.test_gguf_metadata import HOSTILE, assert_inert
from tui_chat.cli import SettingsError, main, parse_config
from tui_chat.config import (
    KEYS,
    MAX_CONFIG_FILE_BYTES,
    ChatSettings,
    Config,
    ConfigError,
    format_config,
    load_config,
    toml_value,
)
from tui_chat.engine.base import SamplingParams
from tui_chat.output import UsageError
from tui_chat.paths import default_config_path

TUI_CHAT = str(Path(sys.executable).parent / "tui-chat")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------ merging


def test_no_file_gives_the_defaults_and_says_so() -> None:
    config = load_config({}, environ={})
    defaults = Config()
    assert (config.n_ctx, config.sampling, config.history) == (
        defaults.n_ctx,
        defaults.sampling,
        defaults.history,
    )
    assert {config.origins[k] for k in KEYS} == {"default"}
    assert config.origins["config_file"] == str(default_config_path())


def test_the_file_in_the_user_config_folder_is_read(tmp_path: Path) -> None:
    # conftest points XDG_CONFIG_HOME at a temporary folder.
    path = write(default_config_path(), "n_ctx = 8192\ntemperature = 0.7\nhistory = false\n")
    config = load_config({}, environ={})
    assert (config.n_ctx, config.sampling.temperature, config.history) == (8192, 0.7, False)
    assert config.origins["n_ctx"] == str(path)
    assert config.origins["top_p"] == "default"


def test_layers_environment_over_file_flags_over_both(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "n_ctx = 1000\nn_batch = 64\ntop_k = 5\nseed = 3\n")
    env = {"TUI_CHAT_N_BATCH": "128", "TUI_CHAT_TOP_K": "7"}
    config = load_config({"top_k": 9}, config_file=path, environ=env)
    assert config.n_ctx == 1000 and config.origins["n_ctx"] == str(path)
    assert config.n_batch == 128 and config.origins["n_batch"] == "TUI_CHAT_N_BATCH"
    assert config.sampling.top_k == 9 and config.origins["top_k"] == "--top-k"
    assert config.sampling.seed == 3


def test_a_flag_equal_to_the_default_still_wins_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "n_ctx = 8192\n")
    config, _ = parse_config(["--config", str(path), "--n-ctx", "4096"])
    assert config.n_ctx == 4096 and config.origins["n_ctx"] == "--n-ctx"


def test_every_flag_setting_has_a_key_and_reaches_the_config(tmp_path: Path) -> None:
    argv = [
        "--model", "x.gguf", "--system", "S", "--n-ctx", "100", "--n-gpu-layers", "-1",
        "--threads", "3", "--n-batch", "32", "--chat-format", "chatml", "--max-tokens", "9",
        "--temperature", "0.5", "--top-p", "0.5", "--top-k", "3", "--min-p", "0.1",
        "--repeat-penalty", "1.2", "--seed", "11", "--reasoning-budget", "64", "--thinking", "off",
        "--reasoning-effort", "high", "--show-thinking", "--no-history",
        "--render-interval-ms", "70", "--api-model", "m", "--api-timeout", "5",
    ]  # fmt: skip
    config, _ = parse_config(argv)
    assert config.model == Path("x.gguf") and config.system_prompt == "S"
    assert (config.n_ctx, config.n_gpu_layers, config.threads, config.n_batch) == (100, -1, 3, 32)
    assert config.chat_format == "chatml" and config.render_interval_ms == 70
    assert config.sampling == SamplingParams(9, 0.5, 0.5, 3, 0.1, 1.2, 11, 64, "off", "high")
    assert config.history is False and config.api_model == "m" and config.api_timeout_s == 5
    assert config.show_thinking is True
    flagged = {k for k, origin in config.origins.items() if origin.startswith("--")}
    # Every key that has a flag was set by it here (api_base excludes --model).
    assert flagged == {k.name for k in KEYS.values() if k.flag and k.name != "api_base"}


def test_paths_in_the_file_are_relative_to_its_folder(tmp_path: Path) -> None:
    path = write(
        tmp_path / "conf" / "c.toml",
        'model = "m/x.gguf"\nmodel_dirs = ["~/models", "/abs", "here"]\n',
    )
    config = load_config({}, config_file=path, environ={})
    assert config.model == tmp_path / "conf" / "m" / "x.gguf"
    assert config.model_dirs == (
        Path("~/models").expanduser(),
        Path("/abs"),
        tmp_path / "conf" / "here",
    )


def test_model_dirs_from_the_environment_are_a_path_list() -> None:
    config = load_config({}, environ={"TUI_CHAT_MODEL_DIRS": os.pathsep.join(["/a", "/b"])})
    assert config.model_dirs == (Path("/a"), Path("/b"))


def test_kv_cache_limit_is_a_key_for_the_snapshot_cache(tmp_path: Path) -> None:
    assert Config().kv_cache_limit_mb == 2048
    path = write(tmp_path / "c.toml", "kv_cache_limit_mb = 0\n")
    assert load_config({}, config_file=path, environ={}).kv_cache_limit_mb == 0


def test_a_higher_layer_chooses_the_engine(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", 'model = "/m/x.gguf"\n')
    config = load_config({"api_base": "http://h/v1"}, config_file=path, environ={})
    assert config.api_base == "http://h/v1" and config.model is None
    assert config.origins["model"] == "default"
    both = write(tmp_path / "both.toml", 'model = "/x.gguf"\napi_base = "http://h/v1"\n')
    with pytest.raises(ConfigError, match="model and api_base exclude each other"):
        load_config({}, config_file=both, environ={})


def test_the_api_key_is_never_read_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", 'api_key = "sk-secret"\n')
    with pytest.raises(ConfigError) as err:
        load_config({}, config_file=path, environ={})
    message = str(err.value)
    assert "never read from a config file" in message and "TUI_CHAT_API_KEY" in message
    assert "sk-secret" not in message


def test_the_api_key_is_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config({}, environ={"OPENAI_API_KEY": "sk-secret"})
    text = format_config(config)
    assert "sk-secret" not in text
    assert "api_key = (set, never printed)" in text and "OPENAI_API_KEY" in text


# ------------------------------------------------------------------ bad values


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('n_ctx = "big"', ("n_ctx", "whole number", '"big"')),
        ("n_ctx = 1.5", ("n_ctx", "whole number", "1.5")),
        ("n_ctx = true", ("n_ctx", "whole number", "true")),
        ("n_ctx = 0", ("n_ctx", "from 1 to", "got 0")),
        ("threads = 100000", ("threads", "from 1 to 1024")),
        ("temperature = -0.5", ("temperature", "from 0 to 10", "-0.5")),
        ("temperature = nan", ("temperature", "from 0 to 10", "nan")),
        ("top_p = 1.5", ("top_p", "from 0 to 1")),
        ("top_p = inf", ("top_p", "from 0 to 1", "inf")),
        ("seed = -2", ("seed", "-1 = random")),
        ("history = 1", ("history", "true or false")),
        ('history = "no"', ("history", "true or false")),
        ('chat_format = "mistral"', ("chat_format", "one of gemma, chatml")),
        ('api_base = "ftp://x"', ("api_base", "http:// or https://")),
        ("api_timeout_s = 0", ("api_timeout_s", "more than 0 s")),
        ('model_dirs = "/one"', ("model_dirs", "a list")),
        ("model_dirs = [1]", ("model_dirs", "must be a string")),
        ("render_interval_ms = [80]", ("render_interval_ms", "whole number", "[80]")),
        ("max_tokens = {a = 1}", ("max_tokens", "whole number")),
        ('api_model = "a\\nb"', ("api_model", "control characters")),
    ],
)
def test_a_bad_value_names_the_key_the_file_and_what_is_allowed(
    tmp_path: Path, toml: str, words: tuple[str, ...]
) -> None:
    path = write(tmp_path / "c.toml", toml + "\n")
    with pytest.raises(ConfigError) as err:
        load_config({}, config_file=path, environ={})
    message = str(err.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_an_unknown_key_is_refused_with_the_nearest_key(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "n_gpu_layer = -1\n")
    with pytest.raises(ConfigError, match=r'unknown key "n_gpu_layer" \(did you mean n_gpu_layers'):
        load_config({}, config_file=path, environ={})
    table = write(tmp_path / "t.toml", "[sampling]\ntemperature = 1\n")
    with pytest.raises(ConfigError, match='unknown key "sampling"'):
        load_config({}, config_file=table, environ={})


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"n_ctx = = 3\n", ("not valid TOML", "line 1")),
        (b'system_prompt = "\xff\xfe"\n', ("not UTF-8",)),
        (b"a = " + b"[" * 2000 + b"]" * 2000, ("c.toml",)),
        (b"# " + b"x" * MAX_CONFIG_FILE_BYTES, ("larger than 1024 KiB",)),
    ],
)
def test_a_broken_file_is_one_line(tmp_path: Path, content: bytes, words: tuple[str, ...]) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        load_config({}, config_file=path, environ={})
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_missing_default_file_is_fine_but_a_named_one_must_exist(tmp_path: Path) -> None:
    assert not default_config_path().exists()
    load_config({}, environ={})
    with pytest.raises(ConfigError, match="config file not found"):
        load_config({}, config_file=tmp_path / "nope.toml", environ={})


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        load_config({}, config_file=folder, environ={})
    if os.geteuid() != 0:  # root reads a file whatever its mode
        locked = write(tmp_path / "locked.toml", "n_ctx = 1\n")
        locked.chmod(0)
        with pytest.raises(ConfigError, match="cannot read the config file"):
            load_config({}, config_file=locked, environ={})


def test_a_config_folder_under_a_regular_file_counts_as_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As C27 for the data folder: XDG_CONFIG_HOME below a regular file.
    blocker = write(tmp_path / "file", "")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker / "sub"))
    assert load_config({}, environ={}).origins["n_ctx"] == "default"


def test_bad_environment_values_name_the_variable() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({}, environ={"TUI_CHAT_N_CTX": "lots"})
    assert str(err.value) == (
        "TUI_CHAT_N_CTX (environment): n_ctx must be a whole number from 1 to 16777216 "
        '(tokens), got "lots"'
    )
    with pytest.raises(ConfigError, match="TUI_CHAT_HISTORY.*true or false"):
        load_config({}, environ={"TUI_CHAT_HISTORY": "maybe"})


def test_flag_values_are_checked_with_the_same_rules() -> None:
    # A usage error (main() adds "see tui-chat --help"), not a settings error.
    with pytest.raises(UsageError, match="--top-k must be a whole number from 0") as err:
        parse_config(["--top-k", "-5"])
    assert not isinstance(err.value, SettingsError)
    with pytest.raises(UsageError, match="--chat-format must be one of"):
        parse_config(["--chat-format", "nonsense"])


def test_hostile_strings_are_quoted_inert_in_errors_and_print_config(tmp_path: Path) -> None:
    hostile_key = write(tmp_path / "k.toml", f"{toml_value(HOSTILE)} = 1\n")
    with pytest.raises(ConfigError) as err:
        load_config({}, config_file=hostile_key, environ={})
    assert_inert(str(err.value).encode())
    value = write(tmp_path / "v.toml", f"chat_format = {toml_value(HOSTILE)}\n")
    with pytest.raises(ConfigError) as err:
        load_config({}, config_file=value, environ={})
    assert_inert(str(err.value).encode())
    prompt = write(tmp_path / "p.toml", 'system_prompt = "be \\u001b[2J nice \\u202e"\n')
    config = load_config({}, config_file=prompt, environ={})
    assert config.system_prompt == "be \x1b[2J nice \u202e"  # kept raw, as written
    text = format_config(config)
    assert_inert(text.encode())
    assert tomllib.loads(text)["system_prompt"] == config.system_prompt


def test_print_config_reads_back_as_the_same_settings(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        'n_ctx = 2048\nsystem_prompt = "a \\"quoted\\" \\\\ path"\nmodel_dirs = ["/m"]\n',
    )
    config = load_config({"temperature": 0.3}, config_file=path, environ={"TUI_CHAT_SEED": "4"})
    text = format_config(config)
    again = write(tmp_path / "again.toml", text)
    reread = load_config({}, config_file=again, environ={})
    assert reread.n_ctx == 2048 and reread.system_prompt == config.system_prompt
    assert reread.sampling == config.sampling and reread.model_dirs == (Path("/m"),)
    lines = {line.split("=")[0].strip(): line for line in text.splitlines() if "=" in line}
    assert lines["n_ctx"].endswith(f'# file "{path}"')
    assert lines["temperature"].endswith("# flag --temperature")
    assert lines["seed"].endswith("# environment TUI_CHAT_SEED")
    assert lines["top_p"].endswith("# default")


# ------------------------------------------------------------------ the command


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUI_CHAT, *args],
        capture_output=True,
        text=True,
        env=env or app_env(),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def test_print_config_command(tmp_path: Path) -> None:
    config_home = tmp_path / "xdg"
    write(config_home / "tui-chat" / "config.toml", "n_ctx = 8192\n")
    env = {**app_env(), "XDG_CONFIG_HOME": str(config_home), "TUI_CHAT_TOP_K": "12"}
    out = run_cli("--print-config", "--seed", "5", env=env)
    assert out.returncode == 0 and out.stderr == ""
    settings = tomllib.loads(out.stdout)
    assert (settings["n_ctx"], settings["top_k"], settings["seed"]) == (8192, 12, 5)
    assert "tui-chat/config.toml" in out.stdout and "TUI_CHAT_TOP_K" in out.stdout


def test_a_bad_file_stops_the_start_with_one_line_and_status_2(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "n_ctx = -3\n")
    out = run_cli("--config", str(path), "-p", "hi")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        f"tui-chat: {path}: n_ctx must be a whole number from 1 to 16777216 (tokens), got -3\n"
    )


def test_main_prints_config_without_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "c.toml", 'model = "/no/such/model.gguf"\n')
    assert main(["--config", str(path), "--print-config"]) == 0
    assert 'model = "/no/such/model.gguf"' in capsys.readouterr().out


# -------------------------------------------------------- conversation settings


def test_chat_settings_round_trip_and_hostile_rows() -> None:
    fallback = ChatSettings(None, SamplingParams())
    mine = ChatSettings("Be brief.", SamplingParams(temperature=0.9, top_k=7, seed=3))
    assert ChatSettings.from_json(mine.to_json(), fallback) == (mine, [])
    settings, problems = ChatSettings.from_json(
        '{"temperature": "hot", "top_p": 0.5, "system_prompt": 7, "seed": 1e400}', fallback
    )
    assert settings.sampling.top_p == 0.5
    assert settings.sampling.temperature == fallback.sampling.temperature
    assert settings.system_prompt is None and len(problems) == 3
    for text in ("not json", "[1, 2]", "x" * 10**7, None, "[" * 100_000):
        assert ChatSettings.from_json(text, fallback)[0] == fallback


def test_print_config_into_a_closed_pipe_is_quiet() -> None:
    # As `tui-chat --print-config | head -1` once the reader has gone (replay case C28).
    code = (
        "import sys\n"
        "from tui_chat.cli import main\n"
        "class Gone:\n"
        "    def write(self, text): raise BrokenPipeError(32, 'Broken pipe')\n"
        "    def flush(self): pass\n"
        "sys.stdout = Gone()\n"
        "sys.exit(main(['--print-config']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=app_env(), timeout=60
    )
    assert (out.returncode, out.stderr) == (141, "")
