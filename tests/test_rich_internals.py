"""The Rich internals tui_chat.markdown.render relies on, checked so that a new Rich
fails here, loudly, and not as a subtly wrong reply on screen (issue 17).

pyproject.toml bounds Rich to the majors these were checked on (``rich>=14,<16``); a
new major is let in by widening that bound once these tests pass on it.
"""

from __future__ import annotations

import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

from rich._wrap import divide_line
from rich.markdown import Markdown

from tui_chat.markdown.blocks import DEFAULT_LIMITS, parser
from tui_chat.markdown.render import _Doc

ROOT = Path(__file__).resolve().parent.parent


def test_the_installed_rich_is_within_the_bound_of_pyproject() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.split(">")[0].split("=")[0].strip() == "rich"]
    upper = int(spec.split("<")[1].split(",")[0])
    assert int(version("rich").split(".")[0]) < upper, (spec, version("rich"))


def test_our_markdown_document_sets_every_attribute_rich_markdown_sets() -> None:
    # _Doc skips Markdown.__init__ (it would build a parser of its own); it must set
    # every attribute that __init__ sets, or Rich's drawing reads one that is missing.
    rich_attrs = set(vars(Markdown("x")))
    ours = set(vars(_Doc(parser().parse("x"), DEFAULT_LIMITS, None)))
    assert rich_attrs <= ours, sorted(rich_attrs - ours)


def test_divide_line_takes_text_width_and_fold() -> None:
    params = list(inspect.signature(divide_line).parameters)
    assert params[:3] == ["text", "width", "fold"]
    assert divide_line("aaa bbb ccc", 7, fold=True) == [8]  # "aaa bbb " | "ccc"
