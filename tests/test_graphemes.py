"""The composer and the system prompt editor move and delete by grapheme cluster
(issue 20, item 4): Backspace after a flag removes the flag, not half of it.

Unit tests of the boundaries (:mod:`tui_chat.ui.graphemes`, UAX #29 extended grapheme
clusters), then Pilot tests at 80x24 that type into the real composer and press keys.
"""

from __future__ import annotations

import unicodedata

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import TextArea

from tests.support import fake_config, wait_for
from tests.test_app_stream import ready
from tests.test_composer import SIZE, composer, replies
from tests.test_settings_screen import engine, open_settings
from tui_chat.ui.app import make_app
from tui_chat.ui.graphemes import next_boundary, previous_boundary

FLAG = "\U0001f1eb\U0001f1f7"  # 🇫🇷: two regional indicators
SKIN_TONE = "\U0001f44d\U0001f3fd"  # 👍🏽: thumbs up + medium skin tone modifier
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # 👨‍👩‍👧: joined by ZWJ
HEART = "\u2764\ufe0f"  # ❤️: heavy black heart + VARIATION SELECTOR-16
ACCENT = "e\u0301"  # é: e + COMBINING ACUTE ACCENT
ENGLAND = "\U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in "gbeng") + "\U000e007f"
"""🏴󠁧󠁢󠁥󠁮󠁧󠁿: black flag + the tag characters g b e n g + CANCEL TAG (a subdivision flag)."""

CLUSTERS = {
    "flag": FLAG,
    "skin tone": SKIN_TONE,
    "ZWJ family": FAMILY,
    "VS16 heart": HEART,
    "combining accent": ACCENT,
    "tag flag": ENGLAND,
    "ASCII": "x",
    "CJK": "\u6f22",  # 漢
}
KINDS = pytest.mark.parametrize("cluster", list(CLUSTERS.values()), ids=list(CLUSTERS))


@KINDS
def test_the_boundaries_step_over_one_whole_cluster(cluster: str) -> None:
    line = f"ab{cluster}{cluster}cd"
    first, second = 2, 2 + len(cluster)
    end = second + len(cluster)
    assert next_boundary(line, first) == second
    assert next_boundary(line, second) == end
    assert previous_boundary(line, end) == second
    assert previous_boundary(line, second) == first
    assert previous_boundary(line, first) == first - 1  # plain ASCII: one code point


@KINDS
def test_a_column_inside_a_cluster_goes_to_its_edges(cluster: str) -> None:
    line = f"a{cluster}b"
    for inside in range(2, 1 + len(cluster)):
        assert previous_boundary(line, inside) == 1
        assert next_boundary(line, inside) == 1 + len(cluster)


def test_the_line_ends_are_boundaries() -> None:
    assert previous_boundary("", 0) == 0
    assert next_boundary("", 0) == 0
    assert previous_boundary(FLAG, 0) == 0
    assert next_boundary(FLAG, len(FLAG)) == len(FLAG)
    assert previous_boundary(FLAG, len(FLAG) + 3) == 0  # past the end counts as the end


def test_regional_indicators_pair_from_the_start_of_the_line() -> None:
    two_flags = FLAG + "\U0001f1e9\U0001f1ea"  # 🇫🇷🇩🇪: four indicators, two flags
    assert next_boundary(two_flags, 0) == 2
    assert previous_boundary(two_flags, 4) == 2


def test_plain_ascii_and_cjk_step_by_one_code_point() -> None:
    line = "ab\u6f22\u5b57"
    assert [next_boundary(line, c) for c in range(4)] == [1, 2, 3, 4]
    assert [previous_boundary(line, c) for c in range(1, 5)] == [0, 1, 2, 3]


async def type_text(pilot: Pilot[int], area: TextArea, text: str) -> None:
    """Type ``text`` into the focused ``area`` one code point per key, as Textual's
    terminal parser reports them (``Key("regional_indicator_symbol_letter_f", "🇫")``).
    ``pilot.press`` cannot: it drops the character of a key named after an emoji."""
    for char in text:
        name = char if char.isalnum() else unicodedata.name(char).lower().replace(" ", "_")
        pilot.app.post_message(events.Key(name, char))
    await wait_for(lambda: area.text.endswith(text))


@KINDS
async def test_backspace_deletes_the_whole_cluster_before_the_cursor(cluster: str) -> None:
    app = make_app(fake_config(), replies(0))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await type_text(pilot, composer(app), f"hi {cluster}")
        assert composer(app).text == f"hi {cluster}"
        await pilot.press("backspace")
        assert composer(app).text == "hi "
        assert composer(app).cursor_location == (0, 3)


@KINDS
async def test_left_then_delete_deletes_the_whole_cluster(cluster: str) -> None:
    app = make_app(fake_config(), replies(0))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await type_text(pilot, composer(app), f"hi {cluster}!")
        await pilot.press("left", "left")
        assert composer(app).cursor_location == (0, 3)
        await pilot.press("delete")
        assert composer(app).text == "hi !"
        await pilot.press("right")
        assert composer(app).cursor_location == (0, 4)


@KINDS
async def test_shift_left_selects_the_whole_cluster(cluster: str) -> None:
    app = make_app(fake_config(), replies(0))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await type_text(pilot, composer(app), f"hi {cluster}")
        await pilot.press("shift+left")
        assert composer(app).selected_text == cluster
        await pilot.press("shift+left", "shift+right")
        assert composer(app).selected_text == cluster


async def test_at_a_line_start_left_and_backspace_still_join_the_lines() -> None:
    app = make_app(fake_config(), replies(0))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await type_text(pilot, composer(app), FLAG)
        await pilot.press("ctrl+j")
        await type_text(pilot, composer(app), FAMILY)
        await pilot.press("home", "left")
        assert composer(app).cursor_location == (0, len(FLAG))
        await pilot.press("right")
        assert composer(app).cursor_location == (1, 0)
        await pilot.press("backspace")
        assert composer(app).text == FLAG + FAMILY
        assert composer(app).cursor_location == (0, len(FLAG))


async def test_backspace_in_the_system_prompt_deletes_the_whole_cluster() -> None:
    app = make_app(fake_config(), engine())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_settings(pilot, app)
        screen.prompt_area.load_text("")
        screen.prompt_area.focus()
        await type_text(pilot, screen.prompt_area, f"be nice {FAMILY}{FLAG}")
        await pilot.press("backspace")
        assert screen.prompt_area.text == f"be nice {FAMILY}"
        await pilot.press("shift+left")
        assert screen.prompt_area.selected_text == FAMILY
