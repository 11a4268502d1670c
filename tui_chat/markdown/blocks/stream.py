"""The block structure of a reply that grows by appends (see :mod:`tui_chat.markdown.blocks`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tui_chat.markdown.blocks.dialect import (
    DEFAULT_LIMITS,
    Limits,
    TopBlock,
    parser,
    reference_labels,
    top_level,
)
from tui_chat.markdown.blocks.kinds import SplitKind, kind_of
from tui_chat.markdown.blocks.parts import Block, Unit


def _lines(src: str) -> list[int]:
    """Offsets of the start of each line of ``src`` (a last partial line included)."""
    starts = [0]
    pos = src.find("\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = src.find("\n", pos + 1)
    return starts


def _refs_of(env: dict[str, Any]) -> dict[str, Any]:
    refs = env.get("references", {})
    assert isinstance(refs, dict)
    return refs


def _same_ref(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return bool(a["href"] == b["href"] and a["title"] == b["title"])


class BlockStream:
    """The block structure of a reply that grows by appends (sanitized text).

    Args:
        limits: sizes that bound the work per append (see :class:`Limits`).

    After each :meth:`append`, :attr:`frozen` holds the blocks that are final (a list
    that only grows, except that an item is replaced when a reference definition
    changes it: its index is added to :attr:`replaced`) and :attr:`live` the blocks
    after them. :attr:`generation` changes when everything starts again (a final text
    that is not the text appended). The cost of an append does not grow with the
    length of the reply, except when a reference definition changes earlier blocks or
    a split block has to be parsed again in full (see :mod:`tui_chat.markdown.blocks`).
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._md = parser(limits)
        self.overflows = 0  # updates whose structure did not settle (a bug; tests check)
        self.generation = 0
        self._reset()

    def _reset(self) -> None:
        self.generation += 1  # painters start again
        self._parts: list[str] = []
        self._length = 0
        self.frozen: list[Block] = []
        self.live: list[Block] = []
        self.replaced: list[int] = []
        self._win = ""  # the text of the window (the live text, or the split block's rest)
        self._win_start = 0  # offset of the window's text in the reply
        self._split: SplitKind | None = None
        self._refs_frozen: dict[str, Any] = {}  # definitions in frozen text
        self._refs_split: dict[str, Any] = {}  # definitions in split-off parts
        self._refs_seen: dict[str, Any] = {}  # every definition at the last parse
        self._label_index: dict[str, list[int]] = {}  # label -> frozen block indices

    # ---------------------------------------------------------------- public
    @property
    def text(self) -> str:
        """All text appended so far."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def __len__(self) -> int:
        return self._length

    @property
    def live_chars(self) -> int:
        """Characters parsed again at each append (the window; bounded by ``limits``)."""
        return len(self._split.prefix if self._split else "") + len(self._win)

    @property
    def split_block(self) -> Block | None:
        """The live block being split (the first of :attr:`live`), if any."""
        return self._split.block if self._split is not None else None

    def append(self, text: str) -> None:
        """Add ``text`` at the end and bring the blocks up to date."""
        if not text:
            return
        self._parts.append(text)
        self._length += len(text)
        self._win += text
        self._update()

    def finish(self, text: str) -> None:
        """The reply is complete and reads ``text``.

        ``text`` may drop whitespace from the end of what was appended (a stop string's
        leading space); anything else starts the structure again from ``text`` (one
        parse of the whole).
        """
        current = self.text
        cut = len(current) - len(text)
        if text != current and not (
            current.startswith(text) and not current[len(text) :].strip() and cut <= len(self._win)
        ):
            self._reset()
            self.append(text)
            return
        if cut:
            self._parts = [text]
            self._length = len(text)
            self._win = self._win[: len(self._win) - cut]
        self._update()

    # -------------------------------------------------------------- updating
    def _parse(self, src: str) -> tuple[list[TopBlock], dict[str, Any]]:
        env: dict[str, Any] = {"references": {**self._refs_frozen, **self._refs_split}}
        return top_level(self._md.parse(src, env)), env

    def _update(self) -> None:
        for _ in range(8):  # a fallback, a freeze and a split each parse again
            split = self._split
            src = (split.prefix if split else "") + self._win
            blocks, env = self._parse(src)
            if split is not None and not self._continues(split, blocks, src):
                self._fallback()
                continue
            refs = _refs_of(env)
            if self._references_changed(refs):
                continue
            starts = _lines(src)
            n_complete = len(starts) - 1
            if self._freeze(blocks, starts, n_complete, src, refs):
                continue
            if self._split_last(blocks, starts, n_complete, src, env):
                continue
            self._set_live(blocks, starts, src)
            return
        self.overflows += 1
        self._set_live(blocks, _lines(src), src)

    def _real(self, offset: int, src: str) -> int:
        """Reply offset of window offset ``offset`` (``src`` = prefix + window)."""
        return self._win_start + offset - (len(src) - len(self._win))

    def _continues(self, split: SplitKind, blocks: list[TopBlock], src: str) -> bool:
        """Whether the window still parses as the rest of the split block."""
        return bool(blocks) and blocks[0].start == 0 and split.continues(blocks[0], src)

    def _fallback(self) -> None:
        """Parse the split block again from its start (once: it is rare)."""
        split = self._split
        assert split is not None
        start = split.window_start
        self._win = self.text[start:]
        self._win_start = start
        self._split = None
        self._refs_split = {}

    def _references_changed(self, refs: dict[str, Any]) -> bool:
        """Parse again the frozen blocks whose links a change of definitions changed.

        Returns True when the split block mentions a changed label (it is then parsed
        again in full).
        """
        seen = self._refs_seen
        changed = {
            label
            for label in refs.keys() | seen.keys()
            if not _same_ref(refs.get(label), seen.get(label))
        }
        self._refs_seen = dict(refs)
        if not changed:
            return False
        for index in sorted({i for label in changed for i in self._label_index.get(label, ())}):
            self._rebuild_frozen(index, refs)
        if self._split is not None and changed & self._split.labels:
            self._fallback()
            return True
        return False

    def _rebuild_frozen(self, index: int, refs: dict[str, Any]) -> None:
        old = self.frozen[index]
        env: dict[str, Any] = {"references": dict(refs)}
        tokens = self._md.parse(self.text[old.start : old.end], env)
        (top, *_rest) = top_level(tokens) or [TopBlock(tokens, 0, 0)]
        self.frozen[index] = Block(
            old.kind, [Unit(top.tokens)], old.start, old.end, old.labels, n_stable=1
        )
        self.replaced.append(index)

    def _freeze(
        self,
        blocks: list[TopBlock],
        starts: list[int],
        n_complete: int,
        src: str,
        refs: dict[str, Any],
    ) -> bool:
        """Freeze the leading closed blocks; True when the window changed."""
        closed = 0
        while closed + 1 < len(blocks) and kind_of(blocks[closed].kind).is_closed(
            blocks[closed + 1], starts, n_complete, src
        ):
            closed += 1
        if not closed or len(src) <= self.limits.freeze_chars:
            return False
        split = self._split
        # The window restarts after the last frozen block: a reference definition after
        # it may still take the next line as its title.
        last = closed - 1
        cut_line = blocks[last].end
        cut = starts[cut_line]
        for i, top in enumerate(blocks[:closed]):
            start = self._real(starts[top.start], src)
            end = self._real(starts[blocks[i + 1].start] if i < last else cut, src)
            if i == 0 and split is not None:
                block = split.block
                block.units[block.n_stable :] = split.live_units(top, self._refs_seen)
                block.end = end
                block.labels = block.labels | reference_labels(top.tokens)
            else:
                block = Block(
                    top.kind, [Unit(top.tokens)], start, end, reference_labels(top.tokens)
                )
            block.n_stable = len(block.units)
            for label in block.labels:
                self._label_index.setdefault(label, []).append(len(self.frozen))
            self.frozen.append(block)
        self._keep_refs(refs, cut_line, self._refs_frozen)
        self._refs_frozen.update(self._refs_split)
        self._refs_split = {}
        self._win_start = self._real(cut, src)
        self._win = src[cut:]
        self._split = None
        return True

    def _set_live(self, blocks: list[TopBlock], starts: list[int], src: str) -> None:
        live: list[Block] = []
        split = self._split
        for i, top in enumerate(blocks):
            end = self._real(starts[blocks[i + 1].start], src) if i + 1 < len(blocks) else -1
            if i == 0 and split is not None:
                block = split.block
                block.units[block.n_stable :] = split.live_units(top, self._refs_seen)
                block.end = end
            else:
                start = self._real(starts[top.start], src)
                block = Block(top.kind, [Unit(top.tokens)], start, end)
            live.append(block)
        self.live = live

    # -------------------------------------------------------------- splitting
    def _split_last(
        self,
        blocks: list[TopBlock],
        starts: list[int],
        n_complete: int,
        src: str,
        env: dict[str, Any],
    ) -> bool:
        """Set aside the finished parts of a long last block; True when it did."""
        if not blocks:
            return False
        split = self._split
        top = blocks[0]
        if split is None:
            if len(blocks) > 1:
                return False  # the blocks above it are not frozen yet
            kind = kind_of(top.kind)
            if not issubclass(kind, SplitKind):
                return False
            start = self._real(starts[top.start], src)
            block = Block(top.kind, [], start, -1, split=True)
            split = kind(block, self._win_start, self.limits, self._md)
        del split.block.units[split.block.n_stable :]
        window = split.split_off(top, starts, n_complete, src, env)
        if window is None:
            return False
        prefix, cut = window
        self._keep_refs(_refs_of(env), src.count("\n", 0, cut), self._refs_split)
        block = split.block
        block.n_stable = len(block.units)
        for unit in block.units:
            split.labels |= unit.labels
        block.labels = frozenset(split.labels)
        split.prefix = prefix
        self._win_start = self._real(cut, src)
        self._win = src[cut:]
        self._split = split
        return True

    def _keep_refs(self, refs: dict[str, Any], cut_line: int, into: dict[str, Any]) -> None:
        """Keep the definitions above window line ``cut_line`` (the window moves past it)."""
        for label, ref in refs.items():
            stable = label in self._refs_frozen or label in self._refs_split
            if ref["map"][0] < cut_line and not stable:
                into[label] = ref
