"""Files into the composer and the size hint (issue 20 item 2).

Pilot tests at 100x30 with the scripted fake engine, in a temporary current folder:
``@`` + part of a name + Tab completes, Enter on the ``@path`` puts the file in as a
fenced block labelled with its path, a binary file gets one line why, the hint shows the
draft's tokens, and a message over the context window is refused with a dialog whose
"send anyway" sends it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready
from tui_chat.engine.base import ChatMessage
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.draft_size import measure
from tui_chat.ui.screens.dialogs import Confirm
from tui_chat.ui.widgets.attach import (
    MAX_FILE_BYTES,
    AttachError,
    at_paths,
    complete,
    fence_for,
    fenced_block,
    path_before_cursor,
    put_in,
    read_text_file,
    resolve,
)
from tui_chat.ui.widgets.composer import Composer

SIZE = (100, 30)


def composer(app: ChatApp) -> Composer:
    return app.query_one("#composer", Composer)


def notices(app: ChatApp) -> list[str]:
    # Textual keeps the toasts shown in a private list; the toast layer is not part of
    # the screen's text.
    return [notification.message for notification in app._notifications]


def one_reply(n_ctx: int = 4096) -> FakeEngine:
    return FakeEngine([paced(["done", EOG], 0)], n_ctx=n_ctx)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.md").write_text("# Notes\n```py\nx = 1\n```\n")
    (tmp_path / "main.py").write_text("print('hi')\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "module_a.py").write_text("a = 1\n")
    (tmp_path / "src" / "module_b.py").write_text("b = 2\n")
    return tmp_path


# ------------------------------------------------------------------ plain functions
def test_path_before_cursor_needs_an_at_after_space() -> None:
    assert path_before_cursor("see @src/ma") == "src/ma"
    assert path_before_cursor("@") == ""
    assert path_before_cursor("mail me at a@b") is None
    assert path_before_cursor("no path") is None


def test_complete_lists_matches_with_folders_marked(folder: Path) -> None:
    assert complete("m", folder) == ["main.py"]
    assert complete("s", folder) == ["src/"]
    assert complete("src/mod", folder) == ["src/module_a.py", "src/module_b.py"]
    assert complete("zzz", folder) == []


def test_fence_outruns_the_files_own_backticks() -> None:
    assert fence_for("plain") == "```"
    assert fence_for("````four") == "`````"
    assert fenced_block("a.py", "x") == "```a.py\nx\n```\n"


def test_read_text_file_refuses_with_one_line(folder: Path) -> None:
    with pytest.raises(AttachError, match="binary"):
        read_text_file(Path("blob.bin"))
    with pytest.raises(AttachError, match="folder"):
        read_text_file(Path("src"))
    (folder / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(AttachError, match="not UTF-8"):
        read_text_file(Path("latin1.txt"))
    (folder / "big.txt").write_text("x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(AttachError, match="limit"):
        read_text_file(Path("big.txt"))


def test_at_paths_outside_fences_and_mail_addresses() -> None:
    draft = "see @a.py, mail me@b.c\n````x.py\n@decorator\n```\n@still.in\n````\n@b.py"
    found = [(at.start, at.token) for at in at_paths(draft)]
    assert found == [(4, "a.py,"), (len(draft) - 5, "b.py")]


def test_resolve_reads_what_exists_and_refuses_in_one_line(folder: Path) -> None:
    found = resolve(at_paths("@main.py. @nothing @blob.bin @src"), folder)
    assert [(item.path, item.text, item.refused) for item in found] == [
        ("main.py", "print('hi')\n", None),
        ("blob.bin", None, "blob.bin is a binary file (it holds NUL bytes)"),
        ("src", None, "src is a folder, not a file"),
    ]


def test_put_in_gives_each_file_lines_of_its_own(folder: Path) -> None:
    def put(draft: str) -> str:
        return put_in(draft, resolve(at_paths(draft), folder))

    block = "```main.py\nprint('hi')\n```\n"
    assert put("review @main.py please") == f"review \n{block}please"
    assert put("@main.py\nand this") == f"{block}and this"
    assert put("@main.py @main.py") == block + block
    assert put("keep @blob.bin as typed") == "keep @blob.bin as typed"


def test_measure_estimates_and_counts() -> None:
    size = measure("x" * 40, [{"role": "user", "content": "y" * 8}], 100)
    assert (size.n_tokens, size.exact) == (10, False)
    assert size.n_left == 100 - 10 - (2 + 4)
    assert size.label().startswith("~10 tokens")
    exact = measure("a b c", [], 10, lambda text: len(text.split()))
    assert (exact.n_tokens, exact.exact, exact.fits) == (3, True, True)
    assert not measure("x" * 100, [], 10).fits
    # A chat already past the window: its oldest turns are left out already.
    long_chat: list[ChatMessage] = [{"role": "user", "content": "y" * 400}]
    assert measure("x" * 8, long_chat, 50).fits
    assert not measure("x" * 400, long_chat, 50).fits  # bigger than the window itself


# ----------------------------------------------------------------------- the app
async def test_at_partial_tab_completes_and_cycles(folder: Path) -> None:
    app = make_app(fake_config(), one_reply())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"look at @ma", "tab")
        assert composer(app).text == "look at @main.py"
        assert app.focused is composer(app)  # Tab completed, it did not move the focus
        composer(app).load_text("")
        await pilot.press(*"@sr", "tab", *"mo", "tab")
        assert composer(app).text == "@src/module_"
        await pilot.press("tab")
        assert composer(app).text == "@src/module_a.py"
        await pilot.press("tab")
        assert composer(app).text == "@src/module_b.py"


async def test_enter_on_at_path_inserts_a_fenced_block(folder: Path) -> None:
    app = make_app(fake_config(), one_reply())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"review @notes.md", "enter")
        # On a line of its own: a fence after other text would open no code block.
        block = "````notes.md\n# Notes\n```py\nx = 1\n```\n````\n"
        await wait_for(lambda: composer(app).text == f"review \n{block}")
        assert app.session.messages() == []  # put in, not sent
        await pilot.press("enter")
        await finished(app, 1)
        assert "```py\nx = 1" in str(app.session.messages()[0]["content"])


async def test_binary_file_gets_one_line_and_nothing_inserted(folder: Path) -> None:
    app = make_app(fake_config(), one_reply())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"@blob.bin", "enter")
        await wait_for(lambda: any("binary file" in line for line in notices(app)))
        assert composer(app).text == "@blob.bin"
        assert app.session.messages() == []
        await pilot.press("enter")  # said once: now it goes as typed
        await finished(app, 1)
        assert app.session.messages()[0]["content"] == "@blob.bin"


async def test_at_paths_anywhere_in_a_draft_go_in_before_it_is_sent(folder: Path) -> None:
    app = make_app(fake_config(), one_reply())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"compare @main.py with @src/module_a.py please")
        composer(app).move_cursor((0, 3))  # the cursor is not after either path
        await pilot.press("enter")
        main, module = "```main.py\nprint('hi')\n```\n", "```src/module_a.py\na = 1\n```\n"
        want = f"compare \n{main}with \n{module}please"
        await wait_for(lambda: composer(app).text == want)
        assert app.session.messages() == []
        assert any("put in main.py, src/module_a.py" in line for line in notices(app))
        await pilot.press("enter")
        await finished(app, 1)
        assert app.session.messages()[0]["content"] == want


async def test_an_at_name_that_is_no_file_is_sent_and_keys_typed_after_enter_stay(
    folder: Path,
) -> None:
    app = make_app(fake_config(), one_reply())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"ping @alice", "enter", *"next")
        await finished(app, 1)
        assert app.session.messages()[0]["content"] == "ping @alice"
        await wait_for(lambda: composer(app).text == "next")


async def test_size_hint_shows_tokens_and_context_left(folder: Path) -> None:
    app = make_app(fake_config(), one_reply(n_ctx=4096))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"x" * 40)
        await wait_for(lambda: "~10 tokens" in screen_text(app))
        assert "of 4,096 left" in screen_text(app)


async def test_a_count_that_comes_back_after_the_composer_is_gone_is_dropped(
    folder: Path,
) -> None:
    # The count is made on a worker thread; CI once saw it arrive as the app closed,
    # the composer already gone, and the handler raised NoMatches.
    from tui_chat.ui.app import DraftMeasured

    app = make_app(fake_config(), one_reply(n_ctx=4096))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await composer(app).remove()
        app.post_message(DraftMeasured(measure("late", [], 4096)))
        await pilot.pause()
        await pilot.pause()
        assert app.is_running and app.return_code is None


async def test_message_over_the_context_is_refused_then_sent_anyway(folder: Path) -> None:
    app = make_app(fake_config(), one_reply(n_ctx=16))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        text = "word " * 20
        composer(app).load_text(text)
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, Confirm))
        dialog = app.screen
        assert isinstance(dialog, Confirm)
        assert "over the 16-token context window" in dialog.question
        assert app.session.messages() == []
        await pilot.press("n")  # cancel: the draft comes back
        await wait_for(lambda: composer(app).text == text)
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        await wait_for(lambda: bool(app.session.messages()))
        assert app.session.messages()[0]["content"] == text.strip()


def test_the_real_model_counts_tokens_and_stops_counting_once_closed() -> None:
    from tests.support import SMOLLM2_PATH, need_model, skip_unless_the_engine_runs
    from tui_chat.engine.llama import LlamaEngine

    skip_unless_the_engine_runs()
    engine = LlamaEngine(need_model(SMOLLM2_PATH), n_ctx=512)
    assert engine.count_tokens("hello") is None  # not loaded yet
    engine.load()
    try:
        n = engine.count_tokens("The quick brown fox jumps over the lazy dog.")
        assert n is not None and 8 <= n <= 14
    finally:
        engine.close()
    assert engine.count_tokens("hello") is None
