"""The live reply on screen (issue 9): as a one-shot render draws it, at every width,
nothing the model wrote lost (C34, C35), and turns that leave the screen let their lines
go (C37)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from rich.segment import Segment
from textual._styles_cache import StylesCache
from textual.geometry import Size

from tests.helpers import reply_turns, screen_text
from tests.stream_check import cells
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready, send
from tests.test_markdown_stream import C35_REPLY
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.markdown.blocks import DEFAULT_LIMITS
from tui_chat.markdown.render import markdown_lines
from tui_chat.sanitize import sanitize
from tui_chat.ui.app import MAX_MOUNTED_TURNS, ChatApp, make_app
from tui_chat.ui.markdown_view import MarkdownView, StreamingMarkdown

SIZE = (100, 40)

MIXED_REPLY = (
    "# Plan\n\nFirst we **parse** the `input`, then:\n\n"
    + "".join(f"{k}. step {k} of the plan, with a [link](http://x.y/{k})\n" for k in range(1, 13))
    + "\n```python\n"
    + "".join(f"def step_{k}(x):\n    return x * {k}\n" for k in range(30))
    + "```\n\n| name | n |\n|---|--:|\n"
    + "".join(f"| row {k} | {k * k} |\n" for k in range(30))
    + "\n> quoted words " * 3
    + "\n\n---\n\nThe end, see [docs].\n\n[docs]: https://example.com/docs\n"
)


def reply_view(app: ChatApp) -> MarkdownView:
    (turn,) = reply_turns(app)
    return turn.query_one(MarkdownView)


def view_cells(view: MarkdownView) -> list[tuple[tuple[str, object], ...]]:
    """The reply widget's lines as cells (its current content, laid out or not),
    without the text offsets each line carries for mouse selection."""
    width = view.content_size.width
    height = view.get_content_height(Size(width, 0), Size(width, 0), width)
    return cells(
        [Segment(s.text, s.style.clear_meta_and_links() if s.style else None) for s in line]
        for line in (view.render_line(y) for y in range(height))
    )


def one_shot_cells(
    app: ChatApp, view: MarkdownView, text: str
) -> list[tuple[tuple[str, object], ...]]:
    width = view.content_size.width
    options = app.console_options.update_width(width).update(highlight=False)
    lines = markdown_lines(sanitize(text), app.console, options, DEFAULT_LIMITS)
    style = view.rich_style
    return cells(list(Segment.apply_style(line, style)) for line in lines)


async def stream_reply(reply: str, pieces: list[str], interval_ms: int = 20) -> ChatApp:
    engine = FakeEngine([paced([*pieces, EOG], 2000)])
    return make_app(fake_config(render_interval_ms=interval_ms), engine)


async def test_streamed_reply_is_drawn_as_the_one_shot_render() -> None:
    pieces = [MIXED_REPLY[i : i + 5] for i in range(0, len(MIXED_REPLY), 5)]
    app = await stream_reply(MIXED_REPLY, pieces)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        view = reply_view(app)
        assert isinstance(view, StreamingMarkdown)
        assert view_cells(view) == one_shot_cells(app, view, MIXED_REPLY)
        # The same at another width: the finished reply draws itself again.
        await pilot.resize_terminal(67, 40)
        await pilot.pause()
        await pilot.pause()
        assert view_cells(view) == one_shot_cells(app, view, MIXED_REPLY)


async def test_streamed_and_reloaded_replies_look_the_same(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    pieces = [MIXED_REPLY[i : i + 7] for i in range(0, len(MIXED_REPLY), 7)]
    engine = FakeEngine([paced([*pieces, EOG], 2000)])
    app = make_app(fake_config(render_interval_ms=20), engine, history=path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        streamed = view_cells(reply_view(app))
    resumed = make_app(fake_config(resume=True), FakeEngine([]), history=path)
    async with resumed.run_test(size=SIZE) as pilot:
        await ready(resumed)
        await wait_for(lambda: bool(reply_turns(resumed)))  # the history loads
        await pilot.pause()
        assert view_cells(reply_view(resumed)) == streamed


async def test_c34_every_character_the_model_wrote_is_on_screen() -> None:
    reply = (
        "Use Vec<String> for owned strings. In C++ write std::vector<int> v;\nand test 0<x or x>10."
    )
    pieces = [reply[i : i + 3] for i in range(0, len(reply), 3)]
    app = await stream_reply(reply, pieces)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        screen = " ".join(screen_text(app).split())
        for fragment in ("Vec<String>", "std::vector<int> v;", "0<x or x>10."):
            assert fragment in screen


async def test_c35_the_streamed_screen_is_the_one_shot_render_at_every_paint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pieces = [C35_REPLY[i : i + 4] for i in range(0, len(C35_REPLY), 4)]
    engine = FakeEngine([paced([*pieces, EOG], 300)])
    app = make_app(fake_config(render_interval_ms=20), engine)
    paints: list[bool] = []  # per paint: the widget's lines equal the one-shot render
    original = StreamingMarkdown.append

    def append(self: StreamingMarkdown, text: str) -> None:
        original(self, text)
        if self.content_size.width:
            paints.append(view_cells(self) == one_shot_cells(app, self, self.source))

    monkeypatch.setattr(StreamingMarkdown, "append", append)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        view = reply_view(app)
        assert view_cells(view) == one_shot_cells(app, view, C35_REPLY)
        screen = screen_text(app)
        assert "## Usage" in screen  # inside the README's code block, not a heading
        assert "That is the whole README" in screen
    assert len(paints) > 10 and all(paints)


async def test_c37_turns_that_leave_the_screen_let_their_lines_go() -> None:
    engine = FakeEngine([paced(["A **short** reply\n\n- one\n- two\n", EOG], 0)])
    app = make_app(fake_config(), engine)

    def styles_caches() -> int:
        gc.collect()
        return sum(isinstance(o, StylesCache) for o in gc.get_objects())

    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "q0")
        await finished(app, 1)
        first = weakref.ref(reply_view(app))
        n_turns = 1
        for _ in range(MAX_MOUNTED_TURNS // 2 + 5):
            await send(pilot, f"q{n_turns}")
            n_turns += 1
            await finished(app, n_turns)
        await pilot.pause()
        before = styles_caches()
        assert first() is None  # the first reply left the screen and is gone
        for _ in range(30):
            await send(pilot, f"q{n_turns}")
            n_turns += 1
            await finished(app, n_turns)
        await pilot.pause()
        # 60 more widgets came and went; what they drew did not stay behind.
        assert styles_caches() <= before + 6
