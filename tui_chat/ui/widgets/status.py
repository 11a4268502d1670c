"""The status line: state, numbers of the reply, model name."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tui_chat.engine.base import ModelInfo
from tui_chat.engine.stream import StatsSnapshot
from tui_chat.sanitize import sanitize


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

    def render(self) -> Content:
        return Content(self.text)

    def show(
        self, state: str, stats: StatsSnapshot | None, info: ModelInfo | None, model_name: str
    ) -> None:
        """Show the state, the numbers and the model name (sanitized: a GGUF's name is
        untrusted).

        The state and the numbers come first, the model name last: at 80 columns a
        long file name is what gets cut.
        """
        parts = [state]
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
