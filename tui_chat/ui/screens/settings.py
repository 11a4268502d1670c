"""The settings screen (F2): this conversation's system prompt, sampling and thinking.

Keyboard first, at 80x24: Tab moves between the fields, Enter (in any field, the
system prompt too, as in the composer) or Ctrl+S saves, Ctrl+J (Shift+Enter, Alt+Enter)
starts a new line of the system prompt, Ctrl+R puts the run's settings back into the
fields (the config file and flags), Esc leaves without saving; with edits not saved,
the first Esc says so and a second one (nothing changed since) leaves. A value that
is not allowed is named under the fields, with the rule it breaks (the config file's
rules, :func:`tui_chat.config.check_setting`), and the screen stays open.

Saved settings go to :meth:`~tui_chat.session.ChatSession.apply_settings`: used from
the next reply on and saved with the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Select, Static, TextArea

from tui_chat.config import ChatSettings, check_setting
from tui_chat.engine.base import SamplingParams
from tui_chat.sanitize import sanitize
from tui_chat.ui.graphemes import GraphemeCursor
from tui_chat.ui.widgets.in_order import BindingsInOrder, OrderedInput


@dataclass(frozen=True)
class _Field:
    """A sampling field: its key (as in the config file), its label, int or float."""

    key: str
    label: str
    whole: bool


FIELDS = (
    _Field("temperature", "temperature", False),
    _Field("top_p", "top p", False),
    _Field("top_k", "top k", True),
    _Field("min_p", "min p", False),
    _Field("repeat_penalty", "repeat penalty", False),
    _Field("max_tokens", "max tokens", True),
    _Field("seed", "seed (-1 random)", True),
    _Field("reasoning_budget", "thinking budget", True),
)
"""The sampling fields, in screen order."""

CHOICES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("thinking", "thinking", "thinking", ("auto", "on", "off")),
    ("reasoning_effort", "effort", "reasoning_effort", ("default", "low", "medium", "high")),
)
"""The thinking fields: (key, label, the model's switch that makes it work, values)."""

NUMBER_CHARS = r"[-+0-9.eE]*"
"""What the number fields accept (Textual's ``Input(restrict=...)``): a paste with
anything else, control characters included, is refused whole."""


class PromptArea(GraphemeCursor, BindingsInOrder, TextArea):
    """The system prompt editor; a paste is made inert like any text we did not write
    (control and escape characters become visible symbols: replay case C33).

    Enter asks to save (:class:`PromptArea.Submitted`), as it sends in the composer and
    as the screen's footer says; the composer's new-line keys start a new line."""

    class Submitted(Message):
        """Enter in the system prompt: save the settings."""

    async def _on_key(self, event: events.Key) -> None:
        from tui_chat.ui.widgets.composer import NEWLINE_KEYS

        if event.key == "enter":
            event.stop()
            event.prevent_default()  # TextArea's own handler: no newline
            self.post_message(self.Submitted())
        elif event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            if not self.read_only:
                self.replace("\n", *self.selection, maintain_selection_offset=False)

    async def _on_paste(self, event: events.Paste) -> None:
        event.prevent_default()  # TextArea's own handler would insert the raw text
        if self.read_only:
            return
        self.replace(sanitize(event.text), *self.selection)


class SettingsScreen(ModalScreen[ChatSettings | None]):
    """Edit a conversation's settings; dismissed with the new settings, or None.

    Args:
        current: the settings in use (shown in the fields).
        defaults: what Ctrl+R puts back (the run's settings).
        switches: the thinking switches the loaded model's chat template reads
            (:attr:`~tui_chat.engine.base.ModelInfo.thinking_switches`); a field whose
            switch it lacks is shown with a line saying the model cannot switch.
    """

    DEFAULT_CSS = """
    SettingsScreen {
        align: center middle;
    }
    SettingsScreen > #settings-box {
        width: 78;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $primary;
        border-title-color: $text;
        padding: 0 1;
        background: $surface;
    }
    SettingsScreen .label {
        color: $text-muted;
        height: 1;
    }
    SettingsScreen #system-prompt {
        height: 7;
        margin-bottom: 1;
    }
    SettingsScreen #sampling {
        grid-size: 4;
        grid-columns: 18 1fr 18 1fr;
        grid-rows: 1;
        grid-gutter: 0 1;
        height: auto;
    }
    SettingsScreen #sampling Input {
        width: 1fr;
    }
    SettingsScreen #thinking {
        grid-size: 4;
        grid-columns: 18 1fr 18 1fr;
        grid-rows: 1;
        grid-gutter: 0 1;
        height: auto;
        margin-top: 1;
    }
    SettingsScreen #switch-note {
        color: $text-muted;
        height: auto;
    }
    SettingsScreen #error {
        color: $text-error;
        height: auto;
        margin-top: 1;
    }
    SettingsScreen #keys {
        color: $text-muted;
        margin-top: 1;
        height: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+r", "reset", "Run defaults"),
    ]

    def __init__(
        self, current: ChatSettings, defaults: ChatSettings, switches: tuple[str, ...] = ()
    ) -> None:
        super().__init__()
        self._current = current
        self._defaults = defaults
        self._switches = switches
        # The raw system prompt is kept: the editor shows it sanitized, and an
        # unchanged editor must not write the stand-in symbols back.
        self._raw_prompt = current.system_prompt or ""

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-box") as box:
            box.border_title = "This conversation's settings"
            yield Static("System prompt", classes="label", markup=False)
            yield PromptArea(
                sanitize(self._raw_prompt),
                id="system-prompt",
                soft_wrap=True,
                tab_behavior="focus",
            )
            with Grid(id="sampling"):
                for f in FIELDS:
                    yield Static(f.label, classes="label", markup=False)
                    yield OrderedInput(
                        self._text_of(self._current.sampling, f),
                        id=f"field-{f.key}",
                        compact=True,
                        select_on_focus=True,
                        # Only what a number is written with can be typed or pasted.
                        restrict=NUMBER_CHARS,
                    )
            with Grid(id="thinking"):
                for key, label, _switch, values in CHOICES:
                    yield Static(label, classes="label", markup=False)
                    yield Select(
                        [(v, v) for v in values],
                        value=getattr(self._current.sampling, key),
                        allow_blank=False,
                        compact=True,
                        id=f"field-{key}",
                    )
            missing = [label for _k, label, switch, _v in CHOICES if switch not in self._switches]
            note = (
                f"the model's chat template has no {' or '.join(missing)} switch" if missing else ""
            )
            yield Static(note, id="switch-note", markup=False)
            yield Static("", id="error", markup=False)
            yield Static(
                "Tab next · Enter save · Ctrl+J new line · Ctrl+R run defaults · Esc cancel",
                id="keys",
                markup=False,
            )

    def on_mount(self) -> None:
        self.query_one(PromptArea).focus()
        self._shown = self._values()
        self._discard_asked: tuple[str, ...] | None = None

    def _values(self) -> tuple[str, ...]:
        """What the fields hold now, to tell whether anything was edited."""
        selects = (str(self.query_one(f"#field-{key}", Select).value) for key, *_r in CHOICES)
        fields = (self.field(f.key).value for f in FIELDS)
        return (self.prompt_area.text, *fields, *selects)

    @staticmethod
    def _text_of(sampling: SamplingParams, f: _Field) -> str:
        value = getattr(sampling, f.key)
        return str(int(value)) if f.whole else f"{float(value):g}"

    def field(self, key: str) -> Input:
        """The input of sampling field ``key`` (``temperature``, ``top_p``...)."""
        return self.query_one(f"#field-{key}", Input)

    @property
    def prompt_area(self) -> TextArea:
        """The system prompt editor."""
        return self.query_one(PromptArea)

    # ------------------------------------------------------------- actions
    def action_cancel(self) -> None:
        """Esc: leave, nothing saved. With edits not saved, the first Esc says so and
        stays; a second one with nothing changed since leaves (the edits dropped)."""
        values = self._values()
        if values != self._shown and values != self._discard_asked:
            self._discard_asked = values
            self.query_one("#error", Static).update(
                "unsaved changes: Esc again to discard them, Enter or Ctrl+S to save"
            )
            return
        self.dismiss(None)

    @on(PromptArea.Submitted)
    def _prompt_submitted(self, event: PromptArea.Submitted) -> None:
        event.stop()
        self.action_save()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_save()

    def action_save(self) -> None:
        """Ctrl+S (or Enter in a field): check every field, then leave with them."""
        values: dict[str, object] = {}
        for f in FIELDS:
            widget = self.field(f.key)
            text = widget.value.strip()
            try:
                number: object = int(text) if f.whole else float(text)
            except ValueError:
                number = text
            try:
                values[f.key] = check_setting(f.key, number)
            except ValueError as exc:
                widget.add_class("-invalid")
                widget.focus()
                self.query_one("#error", Static).update(
                    f"{f.label}: {exc} (got {sanitize(text)[:40]!r})"
                )
                return
            widget.remove_class("-invalid")
        shown = self.prompt_area.text
        prompt = self._raw_prompt if shown == sanitize(self._raw_prompt) else shown
        try:
            check_setting("system_prompt", prompt)
        except ValueError as exc:
            self.prompt_area.focus()
            self.query_one("#error", Static).update(f"system prompt: {exc}")
            return
        for key, *_rest in CHOICES:
            values[key] = self.query_one(f"#field-{key}", Select).value
        sampling = SamplingParams(**values)  # type: ignore[arg-type]
        self.dismiss(ChatSettings(prompt or None, sampling))

    def action_reset(self) -> None:
        """Ctrl+R: put the run's settings (config file, flags) into the fields."""
        self._raw_prompt = self._defaults.system_prompt or ""
        self.prompt_area.load_text(sanitize(self._raw_prompt))
        for f in FIELDS:
            self.field(f.key).value = self._text_of(self._defaults.sampling, f)
        for key, *_rest in CHOICES:
            self.query_one(f"#field-{key}", Select).value = getattr(self._defaults.sampling, key)
        self.query_one("#error", Static).update("")
