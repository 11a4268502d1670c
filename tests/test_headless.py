"""Headless mode over the same ChatSession as the TUI: plain text on stdout, sanitized
unless --raw (issue 8), an empty reply is a note on stderr (C29); stdin with -p, input
that is not UTF-8 and --resume ID -p (issue 20)."""

from __future__ import annotations

import dataclasses
import io
import sys

import pytest

from tests.support import fake_config
from tui_chat import cli
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.headless import MAX_STDIN_BYTES, InputError, join_prompt, read_stdin, run_headless
from tui_chat.history.store import Store
from tui_chat.output import not_utf8
from tui_chat.paths import history_path

HOSTILE_REPLY = ["Look: ", "\x1b]0;TITLE\x07", " and ", "\x1b[2J", " done."]


@pytest.mark.parametrize("raw", [False, True])
def test_stdout_is_sanitized_unless_raw(raw: bool, capsys: pytest.CaptureFixture[str]) -> None:
    engine = FakeEngine([paced([*HOSTILE_REPLY, EOG], 0)])
    assert run_headless(fake_config(raw=raw), engine, "hi") == 0
    out, err = capsys.readouterr()
    if raw:
        assert out == "".join(HOSTILE_REPLY) + "\n"
    else:
        assert out == "Look: ␛]0;TITLE␇ and ␛[2J done.\n"
    assert err == ""


def test_c29_empty_reply_prints_nothing_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_headless(fake_config(), FakeEngine([paced([" ", EOG], 0)]), "hi") == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "empty reply" in err


THINKING_REPLY = ["<think>", "\nCount", " them.", "</think>", "\n\n", "Three", "."]


@pytest.mark.parametrize("show", [False, True])
def test_stdout_gets_the_answer_alone_and_stderr_the_thinking_when_asked(
    show: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from tui_chat.engine.reasoning import DEFAULT_FORMAT

    engine = FakeEngine([paced([*THINKING_REPLY, EOG], 0)], thinking=DEFAULT_FORMAT)
    assert run_headless(fake_config(show_thinking=show), engine, "how many?") == 0
    out, err = capsys.readouterr()
    assert out == "Three.\n"
    assert err == ("thinking: Count them.\n" if show else "")


def test_a_reply_cut_while_thinking_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from tui_chat.engine.reasoning import DEFAULT_FORMAT

    engine = FakeEngine([paced(["Hmm", " let", " me", " see"], 0)], thinking=DEFAULT_FORMAT,
                        thinking_open=True)  # fmt: skip
    config = fake_config()
    config.sampling = dataclasses.replace(config.sampling, max_tokens=4)
    assert run_headless(config, engine, "q") == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "ran out of tokens while still thinking (--max-tokens 4)" in err


# ---------------------------------------------------------------- input (issue 20)


def echo_engine() -> FakeEngine:
    """A fake engine whose reply is the last message it was sent, so stdout shows the
    prompt that reached it; ``engine.calls`` holds every conversation sent."""
    return FakeEngine(lambda messages: paced([messages[-1]["content"], EOG], 0))


class PipedStdin:
    """What ``sys.stdin`` is with a pipe or file on fd 0: not a terminal, bytes in
    ``buffer``."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 0


def run_main(
    monkeypatch: pytest.MonkeyPatch, *argv: str, stdin: bytes | None = None
) -> tuple[int, FakeEngine]:
    """``tui-chat ARGV`` in this process, with stdin piped (None: a terminal) and the
    echo engine in place of the model."""
    engine = echo_engine()
    monkeypatch.setattr(cli, "make_engine", lambda _config: engine)
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", PipedStdin(stdin))
    else:
        monkeypatch.setattr(sys, "stdin", type("Tty", (), {"isatty": lambda self: True})())
    return cli.main(list(argv)), engine


@pytest.mark.parametrize(
    ("piped", "prompt", "message"),
    [
        ("def f():\n    return 1\n", "review this", "def f():\n    return 1\n review this"),
        ("", "review this", "review this"),  # < /dev/null changes nothing
        (" \n\n", "review this", "review this"),
        ("  hello\n", None, "hello"),  # stdin alone is the prompt, stripped as before
        ("", None, None),
    ],
)
def test_piped_text_then_the_prompt_as_llm_joins_them(
    piped: str, prompt: str | None, message: str | None
) -> None:
    assert join_prompt(piped, prompt) == message


def test_stdin_and_p_reach_the_engine_as_one_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, engine = run_main(monkeypatch, "-p", "review this", stdin=b"x = 1\n")
    assert code == 0
    assert [m["content"] for m in engine.calls[0] if m["role"] == "user"] == ["x = 1\n review this"]
    assert capsys.readouterr().out == "x = 1\n review this\n"


def test_an_empty_stdin_leaves_the_prompt_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, engine = run_main(monkeypatch, "-p", "hi", stdin=b"")
    assert code == 0
    assert engine.calls[0][-1]["content"] == "hi"


def test_a_byte_order_mark_on_stdin_is_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, engine = run_main(monkeypatch, "-p", "q", stdin="\ufeffnotes".encode())
    assert code == 0
    assert engine.calls[0][-1]["content"] == "notes q"


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"x" * (MAX_STDIN_BYTES + 1), "tui-chat: stdin holds more than 1 MiB, the most "
         "tui-chat reads as a prompt; nothing was sent"),
        (b"caf\xe9 au lait\n", "tui-chat: stdin is not UTF-8 text (byte 0xe9 at offset 3); "
         "nothing was sent"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("prompt", [None, "review this"])
def test_stdin_too_large_or_not_utf8_is_one_line_and_nothing_sent(
    data: bytes,
    line: str,
    prompt: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("-p", prompt) if prompt is not None else ()
    code, engine = run_main(monkeypatch, *argv, stdin=data)
    assert code == 2
    assert engine.calls == []
    out, err = capsys.readouterr()
    assert (out, err) == ("", line + "\n")


def test_stdin_exactly_at_the_limit_is_read() -> None:
    assert read_stdin(io.BytesIO(b"a" * MAX_STDIN_BYTES)) == "a" * MAX_STDIN_BYTES
    with pytest.raises(InputError):
        read_stdin(io.BytesIO(b"a" * 11), limit_bytes=10)


@pytest.mark.parametrize(
    ("text", "bad"),
    [("plain", None), ("caf\udce9", "byte 0xe9"), ("x\ud800", "U+D800"), ("日本", None)],
)
def test_not_utf8_names_the_byte(text: str, bad: str | None) -> None:
    assert not_utf8(text) == bad


def test_a_prompt_with_bytes_not_utf8_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, engine = run_main(monkeypatch, "-p", "caf\udce9")  # how Python decodes argv
    assert code == 2 and engine.calls == []
    assert capsys.readouterr().err == (
        "tui-chat: -p: not UTF-8 text (byte 0xe9 is not; is the terminal set to UTF-8?)\n"
    )


# ----------------------------------------------------------- --resume ID -p


def saved_chat(*contents: str) -> int:
    """A conversation in the test's history: user and assistant turns in turn."""
    store = Store(history_path())
    try:
        cid = store.new_conversation("fake-model")
        for i, content in enumerate(contents):
            store.add_message(cid, {"role": "user" if i % 2 == 0 else "assistant",
                                    "content": content})  # fmt: skip
        return cid
    finally:
        store.close()


@pytest.mark.parametrize("newest", [False, True])
def test_resume_p_answers_in_the_chats_context_and_saves_the_turn(
    newest: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history_path().parent.mkdir(parents=True, exist_ok=True)
    cid = saved_chat("My name is Ada.", "Hello Ada.")
    if not newest:
        saved_chat("another chat", "ok")  # newer: --resume ID must pick its own
    resume = ("--resume",) if newest else ("--resume", str(cid))
    code, engine = run_main(monkeypatch, *resume, "-p", "What is my name?")
    assert code == 0, capsys.readouterr().err
    sent = [(m["role"], m["content"]) for m in engine.calls[0] if m["role"] != "system"]
    assert sent == [
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ]
    store = Store(history_path())
    try:
        kept = [(m["role"], m["content"]) for m in store.messages(cid)]
    finally:
        store.close()
    assert kept == [*sent, ("assistant", "What is my name?")]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("--resume", "7"), "there is no saved conversation 7 (tui-chat list shows them)"),
        (("--resume",), "there is no saved conversation to resume"),
        (("--resume", "--no-history"), "--resume needs the saved history, which this run "
         "does not use (--no-history, history = false in the config, or --replay)"),
    ],
)  # fmt: skip
def test_resume_p_refuses_what_it_cannot_resume(
    argv: tuple[str, ...],
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, engine = run_main(monkeypatch, *argv, "-p", "hi")
    assert code == 2 and engine.calls == []
    assert capsys.readouterr().err == f"tui-chat: {line}\n"
