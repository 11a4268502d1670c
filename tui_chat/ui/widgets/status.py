"""The status line: state, numbers of the reply, GPU offload, a stall, model name."""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tui_chat.engine.base import ModelInfo
from tui_chat.engine.stream import StatsSnapshot
from tui_chat.sanitize import sanitize

SEPARATOR = " │ "


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

    # What gives way first when the line is too long: the model name (shortened, then
    # dropped), then the stall warning is shortened, then the prefill speed and the GPU
    # layers are dropped. The state, TTFT, tokens/s and context are never cut.
    _GIVE_WAY = ("name", "stall", "prefill", "gpu")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts: dict[str, _Part] = {}

    def render(self) -> Content:
        return Content(self.text)

    def on_resize(self) -> None:
        self.text = self._fit(self.content_size.width)

    def show(
        self, state: str, stats: StatsSnapshot | None, info: ModelInfo | None, model_name: str
    ) -> None:
        """Show the state, the numbers, GPU offload, a stall and the model name
        (sanitized: a GGUF's name is untrusted).

        GPU offload shows as ``GPU 30/30`` (layers offloaded / layers) and only when
        layers are offloaded. A stall is shown only while the reply that stalled streams
        (issue 10: it stayed after the reply had ended), and never pushes the numbers
        off a narrow bar (see ``_GIVE_WAY``).
        """
        parts: dict[str, _Part] = {"state": _Part(state)}
        if stats is not None:
            if stats.ttft_ms is not None:
                parts["ttft"] = _Part(f"TTFT {stats.ttft_ms:.0f} ms")
            if stats.decode_tokens_per_s is not None:
                parts["speed"] = _Part(f"{stats.decode_tokens_per_s:.1f} tok/s")
            if stats.prefill_tokens_per_s is not None:
                parts["prefill"] = _Part(f"prefill {stats.prefill_tokens_per_s:.0f} tok/s", "")
            if info is not None and info.n_ctx:  # 0: a server that does not say
                parts["ctx"] = _Part(f"ctx {stats.n_prompt_tokens + stats.n_tokens}/{info.n_ctx}")
        elif info is not None and info.n_ctx:
            parts["ctx"] = _Part(f"ctx 0/{info.n_ctx}")
        if info is not None and info.n_gpu_layers > 0:
            total = f"/{info.n_layers}" if info.n_layers else ""
            parts["gpu"] = _Part(f"GPU {info.n_gpu_layers}{total}", "")
        stall = stats.last_stall if stats is not None and state == "generating" else None
        if stall is not None:
            # Issue 3: a step > 3x the running median means weights are being swapped
            # out or GPU offload thrashes; say so where the user looks.
            parts["stall"] = _Part(
                f"⚠ stall: step {stall.step_ms:.0f} ms, median {stall.median_ms:.0f} ms",
                f"⚠ stall {stall.step_ms:.0f} ms",
            )
        parts["name"] = _Part(sanitize(model_name), "")
        self._parts = parts
        self.text = self._fit(self.content_size.width)
        self.set_class(stall is not None, "-stall")

    def _fit(self, width: int) -> str:
        """The parts joined, made to fit ``width`` cells by ``_GIVE_WAY`` (0: the width
        is not known yet; nothing is cut)."""
        parts = {key: part.text for key, part in self._parts.items() if part.text}

        def line() -> str:
            return SEPARATOR.join(parts.values())

        if width <= 0 or cell_len(line()) <= width:
            return line()
        name = parts.get("name", "")
        room = width - (cell_len(line()) - cell_len(name)) - 1  # one cell for the "…"
        if name and room >= 8:
            parts["name"] = set_cell_size(name, room) + "…"
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
                break
        return line()
