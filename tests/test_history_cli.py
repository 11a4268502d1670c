"""``tui-chat list``, ``tui-chat export`` and ``--resume ID`` (issue 11): output is one
line a conversation, sanitized; Markdown is inert, JSON exact and escaped."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import ready
from tui_chat.cli import UsageError, main, parse_config
from tui_chat.engine.base import ChatMessage
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.headless import EXIT_BROKEN_PIPE
from tui_chat.history.store import Store
from tui_chat.paths import history_path
from tui_chat.ui.app import make_app

HOSTILE = "look \x1b]0;TITLE\x07 here\x9b2J \u202eevil\nsecond line"


def make_history() -> tuple[Path, int, int]:
    """The user's history (in the test's own data folder) with two conversations."""
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(path)
    first = store.new_conversation("model-one")
    store.add_message(first, {"role": "user", "content": "plain question"})
    store.add_message(first, {"role": "assistant", "content": "plain answer"})
    second = store.new_conversation("model\ttwo")
    store.add_message(second, {"role": "user", "content": HOSTILE})
    store.add_message(second, {"role": "assistant", "content": "cut", "interrupted": True})
    store.close()
    return path, first, second


def test_list_prints_one_sanitized_line_a_conversation_newest_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _path, first, second = make_history()
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    fields = [line.split("\t") for line in lines]
    assert [f[0] for f in fields] == [str(second), str(first)]
    assert all(len(f) == 4 for f in fields)  # a tab in a model name does not add a field
    assert fields[0][2] == "model two"
    assert fields[0][3].startswith("look ␛]0;TITLE␇ here<U+009B>2J <U+202E>evil second line")
    assert fields[1][3] == "plain question"
    assert main(["list", "--limit", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_list_without_a_history_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no saved conversations" in captured.err


def test_export_json_keeps_the_exact_text_and_stays_inert(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _path, _first, second = make_history()
    assert main(["export", str(second), "--format", "json"]) == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in out
    data = json.loads(out)
    assert data["format"] == "tui-chat-conversation" and data["id"] == second
    assert data["messages"] == [
        {"role": "user", "content": HOSTILE, "interrupted": False, "reasoning": ""},
        {
            "role": "assistant",
            "content": "cut",
            "interrupted": True,
            "reasoning": "",
            "model": "model\ttwo",  # saved without one: the conversation's
        },
    ]


def test_export_markdown_shows_control_characters_as_symbols(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _path, first, second = make_history()
    assert main(["export", str(second), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out
    assert "## You" in out and "## Assistant" in out and "*(interrupted)*" in out
    assert "look ␛]0;TITLE␇ here" in out
    target = tmp_path / "plain.md"
    assert main(["export", str(first), "-o", str(target)]) == 0
    assert f"to {target}" in capsys.readouterr().err
    text = target.read_text()
    assert text.startswith("# plain question") and "plain answer" in text


def test_export_keeps_a_reply_s_thinking_marked_and_its_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(path)
    cid = store.new_conversation("qwen3")
    store.add_message(cid, {"role": "user", "content": "2+2?"})
    thought: ChatMessage = {
        "role": "assistant",
        "content": "4",
        "reasoning": "add \x1b[2J",
        "model": "qwq",
    }
    store.add_message(cid, thought)
    store.close()
    assert main(["export", str(cid), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "## Assistant (qwq)\n\n> **Thinking**\n>\n> add ␛[2J\n\n4\n" in out
    assert main(["export", str(cid), "--format", "json"]) == 0
    (_user, reply) = json.loads(capsys.readouterr().out)["messages"]
    assert (reply["reasoning"], reply["content"], reply["model"]) == ("add \x1b[2J", "4", "qwq")


def test_export_of_an_unknown_id_fails_with_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    make_history()
    assert main(["export", "999", "--format", "md"]) == 1
    assert "no saved conversation 999" in capsys.readouterr().err
    assert main(["export", "x"]) == 2


def test_list_to_a_closed_pipe_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    make_history()

    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    monkeypatch.setattr("sys.stdout", Closed())
    monkeypatch.setattr("tui_chat.history.cli.silence_output", lambda *fds: None)
    assert main(["list"]) == EXIT_BROKEN_PIPE


def test_resume_takes_an_optional_id() -> None:
    assert parse_config(["--resume"])[0].resume is True
    assert parse_config(["--resume", "7"])[0].resume == 7
    assert parse_config([])[0].resume is False
    assert parse_config(["--resume", "-p", "hi"])[0].resume is True
    with pytest.raises(UsageError, match="conversation id"):
        parse_config(["--resume", "seven"])


async def test_resume_id_opens_that_conversation_not_the_newest() -> None:
    path, first, _second = make_history()
    app = make_app(fake_config(resume=first), FakeEngine([paced(["ok", EOG], 0)]), history=path)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app)
        await wait_for(lambda: "plain answer" in screen_text(app))
        assert app.session.conversation_id == first
        await pilot.pause()


async def test_resume_of_an_unknown_id_says_so_and_starts_a_new_chat() -> None:
    path, _first, _second = make_history()
    app = make_app(fake_config(resume=404), FakeEngine([paced(["ok", EOG], 0)]), history=path)
    async with app.run_test(size=(80, 24), notifications=True):
        await ready(app)
        await wait_for(lambda: "no saved conversation 404" in screen_text(app))
        assert app.session.messages() == []
