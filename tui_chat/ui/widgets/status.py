"""The status line: state, prefill progress, numbers of the reply, model name."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tui_chat.engine.base import ModelInfo
from tui_chat.engine.stream import StatsSnapshot
from tui_chat.sanitize import sanitize
from tui_chat.session.events import (
    PrefillFinished,
    PrefillProgressed,
    ReplyFinished,
    ReplyStarted,
    SessionEvent,
    SnapshotRestored,
)


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
    """The line shown (already sanitized)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._prefill: PrefillProgressed | None = None
        self._resumed: SnapshotRestored | None = None
        self._replies_since_resume = 0

    def track(self, event: SessionEvent) -> bool:
        """Follow the session events the line shows beside the numbers (issue 13): a
        long prefill's progress, and a KV snapshot restored ("resumed from cache"),
        which stays shown through the first reply after it.

        Returns:
            True when the event changed what the line shows (show it again).
        """
        if isinstance(event, PrefillProgressed):
            self._prefill = event
            return True
        if isinstance(event, SnapshotRestored):
            self._resumed, self._replies_since_resume = event, 0
            return True
        if isinstance(event, PrefillFinished | ReplyFinished):
            self._prefill = None
            if isinstance(event, ReplyFinished):
                self._replies_since_resume += 1
        elif isinstance(event, ReplyStarted) and self._replies_since_resume:
            self._resumed = None
        return False

    def render(self) -> Content:
        return Content(self.text)

    def show(
        self,
        state: str,
        stats: StatsSnapshot | None,
        info: ModelInfo | None,
        model_name: str,
        *,
        conversation_id: int | None = None,
    ) -> None:
        """Show the state, the numbers and the model name (sanitized: a GGUF's name is
        untrusted).

        The state and the numbers come first, the model name last: at 80 columns a
        long file name is what gets cut. While a prefill of several batches runs, the
        tokens read of the total and the time left follow the state; "resumed from
        cache" follows when the KV snapshot of ``conversation_id`` (the conversation
        shown) was restored (see :meth:`track`).
        """
        parts = [state]
        prefill = self._prefill
        if prefill is not None:
            # Short: at 80 columns it fits beside "resumed from cache, 2,000 tokens".
            progress = f"prefill {prefill.n_done:,}/{prefill.n_total:,}"
            if prefill.eta_ms is not None:
                progress += f" · {prefill.eta_ms / 1000:.1f} s left"
            parts.append(progress)
        resumed = self._resumed
        if resumed is not None and resumed.conversation_id == conversation_id:
            parts.append(f"resumed from cache, {resumed.n_tokens:,} tokens")
        if stats is not None:
            if stats.ttft_ms is not None:
                parts.append(f"TTFT {stats.ttft_ms:.0f} ms")
            if stats.decode_tokens_per_s is not None:
                parts.append(f"{stats.decode_tokens_per_s:.1f} tok/s")
            if stats.prefill_tokens_per_s is not None:
                parts.append(f"prefill {stats.prefill_tokens_per_s:.0f} tok/s")
            if info is not None and info.n_ctx:  # 0: a server that does not say
                parts.append(f"ctx {stats.n_prompt_tokens + stats.n_tokens}/{info.n_ctx}")
        elif info is not None and info.n_ctx:
            parts.append(f"ctx 0/{info.n_ctx}")
        stall = stats.last_stall if stats is not None else None
        if stall is not None:
            # Issue 3: a step > 3x the running median means weights are being swapped
            # out or GPU offload thrashes; say so where the user looks.
            parts.append(f"⚠ stall: step {stall.step_ms:.0f} ms, median {stall.median_ms:.0f} ms")
        parts.append(sanitize(model_name))
        self.text = " │ ".join(parts)
        self.set_class(stall is not None, "-stall")
