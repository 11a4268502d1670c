"""The status line: state, load or prefill progress, numbers of the reply, GPU
offload, a stall, model name."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tui_chat.engine.base import ModelInfo
from tui_chat.engine.stream import StatsSnapshot
from tui_chat.sanitize import sanitize

if TYPE_CHECKING:
    from tui_chat.session.events import (
        LoadProgressed,
        PrefillProgressed,
        SessionEvent,
        SnapshotRestored,
    )

SEPARATOR = " │ "


def activity(state: str, stats: StatsSnapshot | None) -> tuple[str, bool]:
    """What the line says the app is doing: the state as shown ("thinking" while a
    reply thinks) and whether a stall is shown (only while the reply that stalled
    streams: issue 10). The app redraws the line at once when this changes; its
    numbers refresh on a clock of their own (``tui_chat.ui.app.STATUS_REFRESH_S``)."""
    if state != "generating" or stats is None:
        return state, False
    return ("thinking" if stats.thinking else state), stats.last_stall is not None


@dataclass
class _Part:
    """One part of the line; ``short`` replaces it when the bar is too narrow ("" drops
    it, None keeps it whatever the width)."""

    text: str
    short: str | None = None


class StatusBar(Widget):
    """One line of status; a change repaints this line only, never the layout.

    ``Static.update`` asks for a layout of the whole screen, and the status changes on
    every paint tick while a reply streams.
    """

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        width: 1fr;
    }
    """

    text: reactive[str] = reactive("", layout=False)
    """The line shown (already sanitized), fitted to the bar's width."""

    # What gives way when the line is too long, in this order: the stall warning is
    # shortened, the prefill speed and the GPU layers are dropped, "resumed from cache,
    # N tokens" becomes "from cache" (ctx says how many), then the model name is
    # shortened, or dropped with under 6 cells left. The state, the load or prefill
    # progress and the numbers are never dropped.
    _GIVE_WAY = ("stall", "prefill", "gpu", "resumed")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts: dict[str, _Part] = {}
        self._prefill: PrefillProgressed | None = None
        self._load: LoadProgressed | None = None
        self._resumed: SnapshotRestored | None = None
        self._replies_since_resume = 0
        self.shown_activity: tuple[str, bool] | None = None
        """What the last :meth:`show` said the app was doing (see :func:`activity`)."""
        self.shown_at = 0.0
        """When :meth:`show` last drew the line (``time.monotonic``, seconds)."""

    def track(self, event: SessionEvent) -> bool:
        """Follow the session events the line shows beside the numbers: a model load's
        progress until the model is loaded or failed to (issue 16), a long prefill's
        progress, and a KV snapshot restored ("resumed from cache"), which stays shown
        through the first reply after it (issue 13).

        Returns:
            True when the event changed what the line shows (show it again).
        """
        from tui_chat.session import events as ev  # imported with the session (issue 16)

        if isinstance(event, ev.LoadProgressed):
            self._load = event
            return True
        if isinstance(
            event, ev.ModelLoaded | ev.ModelLoadFailed | ev.ModelSwitchFailed | ev.ModelSwitching
        ):
            had_progress, self._load = self._load is not None, None
            return had_progress
        if isinstance(event, ev.PrefillProgressed):
            self._prefill = event
            return True
        if isinstance(event, ev.SnapshotRestored):
            self._resumed, self._replies_since_resume = event, 0
            return True
        if isinstance(event, ev.PrefillFinished | ev.ReplyFinished):
            self._prefill = None
            if isinstance(event, ev.ReplyFinished):
                self._replies_since_resume += 1
        elif isinstance(event, ev.ReplyStarted) and self._replies_since_resume:
            self._resumed = None
        return False

    def render(self) -> Content:
        return Content(self.text)

    def on_resize(self) -> None:
        self.text = self._fit(self.content_size.width)

    def show(
        self,
        state: str,
        stats: StatsSnapshot | None,
        info: ModelInfo | None,
        model_name: str,
        *,
        conversation_id: int | None = None,
    ) -> None:
        """Show the state, the numbers, GPU offload, a stall and the model name
        (sanitized: a GGUF's name is untrusted; a tab in it shown as one space, so that
        the line is measured, shown and copied by mouse as the same characters: Textual
        issue 6454 reads a selection off the text with its tabs).

        While a model loads, the part loaded and the time left follow the state
        (``loading │ 42% · 12.3 s left``). While a prefill of several batches runs,
        the tokens read of the total and the time left follow the state; "resumed from
        cache" follows when the KV snapshot of ``conversation_id`` (the conversation
        shown) was restored (see :meth:`track`).
        GPU offload shows as ``GPU 30/30`` (layers offloaded / layers) and only when
        layers are offloaded. A stall is shown only while the reply that stalled streams
        (issue 10: it stayed after the reply had ended), and never pushes the numbers
        off a narrow bar (see ``_GIVE_WAY``). While a reply thinks the state reads
        ``thinking``; after a reply that thought, the time to its first answer token
        follows the TTFT (``TTFT 400 ms · answer 12.7 s``).
        """
        shown_state, stalled = self.shown_activity = activity(state, stats)
        self.shown_at = time.monotonic()
        parts: dict[str, _Part] = {"state": _Part(shown_state)}
        load = self._load
        if load is not None:
            # Whole percents: 100% only once it is all in, never rounded up to it.
            progress = f"{int(load.fraction * 100 + 1e-6)}%"
            if load.eta_ms is not None and load.fraction < 1.0:
                progress += f" · {load.eta_ms / 1000:.1f} s left"
            parts["progress"] = _Part(progress)
        prefill = self._prefill
        if prefill is not None:
            # Short: at 80 columns it fits beside "resumed from cache, 2,000 tokens".
            progress = f"prefill {prefill.n_done:,}/{prefill.n_total:,}"
            if prefill.eta_ms is not None:
                progress += f" · {prefill.eta_ms / 1000:.1f} s left"
            parts["progress"] = _Part(progress)
        resumed = self._resumed
        if resumed is not None and resumed.conversation_id == conversation_id:
            parts["resumed"] = _Part(
                f"resumed from cache, {resumed.n_tokens:,} tokens", "from cache"
            )
        if stats is not None:
            if stats.ttft_ms is not None:
                ttft = f"TTFT {stats.ttft_ms:.0f} ms"
                if stats.n_thinking_tokens and stats.ttfa_ms is not None:
                    # After a thinking: when the answer itself began (issue 18).
                    parts["ttft"] = _Part(f"{ttft} · answer {stats.ttfa_ms / 1000:.1f} s")
                else:
                    parts["ttft"] = _Part(ttft)
            if stats.decode_tokens_per_s is not None:
                parts["speed"] = _Part(f"{stats.decode_tokens_per_s:.1f} tok/s")
            if stats.prefill_tokens_per_s is not None:
                parts["prefill"] = _Part(f"prefill {stats.prefill_tokens_per_s:.0f} tok/s", "")
            if info is not None and info.n_ctx:  # 0: a server that does not say
                parts["ctx"] = _Part(f"ctx {stats.n_prompt_tokens + stats.n_tokens}/{info.n_ctx}")
        elif info is not None and info.n_ctx:
            # Before the first reply: what the restored KV snapshot holds, else nothing.
            held = resumed.n_tokens if "resumed" in parts and resumed is not None else 0
            parts["ctx"] = _Part(f"ctx {held}/{info.n_ctx}")
        if info is not None and info.n_gpu_layers > 0:
            total = f"/{info.n_layers}" if info.n_layers else ""
            parts["gpu"] = _Part(f"GPU {info.n_gpu_layers}{total}", "")
        stall = stats.last_stall if stalled and stats is not None else None
        if stall is not None:
            # Issue 3: a step > 3x the running median means weights are being swapped
            # out or GPU offload thrashes; say so where the user looks.
            parts["stall"] = _Part(
                f"⚠ stall: step {stall.step_ms:.0f} ms, median {stall.median_ms:.0f} ms",
                f"⚠ stall {stall.step_ms:.0f} ms",
            )
        parts["name"] = _Part(sanitize(model_name).replace("\t", " "), "")
        self._parts = parts
        self.text = self._fit(self.content_size.width)
        self.set_class(stall is not None, "-stall")

    def _fit(self, width: int) -> str:
        """The parts joined, made to fit ``width`` cells as ``_GIVE_WAY`` says (0: the
        width is not known yet; nothing is cut)."""
        parts = {key: part.text for key, part in self._parts.items() if part.text}

        def line() -> str:
            return SEPARATOR.join(parts.values())

        if width <= 0 or cell_len(line()) <= width:
            return line()
        for key in self._GIVE_WAY:
            part = self._parts.get(key)
            if part is None or part.short is None or key not in parts:
                continue
            if part.short:
                parts[key] = part.short
            else:
                del parts[key]
            if cell_len(line()) <= width:
                return line()
        name = parts.pop("name", "")
        room = width - cell_len(line()) - len(SEPARATOR)
        if name and room >= 6:
            # Shortened to the room left; with less room than that it goes (a separator
            # before a name cut to nothing was left hanging at the edge).
            fits = cell_len(name) <= room
            parts["name"] = name if fits else set_cell_size(name, room - 1) + "…"
        return line()
