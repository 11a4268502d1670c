"""Headless mode over the same ChatSession as the TUI: plain text on stdout, sanitized
unless --raw (issue 8), an empty reply is a note on stderr (C29)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support import fake_config
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.headless import run_headless

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
