"""The model picker (F3): the GGUF files of ``models/`` and of the configured folders,
or the models of the ``--api-base`` server; Enter switches to the highlighted one.

Each local file is described from its header without loading any weights
(:func:`tui_chat.engine.modelfile.describe_model_file`: architecture, parameters,
quantisation, size, trained context length, embedded chat template). Files that
cannot be used (a vision projector, a safetensors file, a cut download, an empty
file) are listed with the reason. All file and network reading runs in a thread
worker; rows appear as they are read and the keys answer throughout.

Picking a model hands a factory to :meth:`~tui_chat.session.ChatSession.switch_engine`,
which unloads the old model and loads the new one on the engine thread between
replies; the status bar shows ``loading`` and then the new model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from tui_chat.config import Config
from tui_chat.engine.base import Engine, EngineError, ModelInfo
from tui_chat.engine.modelfile import (
    ModelFileInfo,
    describe_model_file,
    list_model_files,
    total_memory_bytes,
)
from tui_chat.engines import EngineFactory
from tui_chat.paths import default_model_path, project_models_dir
from tui_chat.sanitize import sanitize

if TYPE_CHECKING:
    from tui_chat.engine.remote import RemoteModel


@dataclass(frozen=True)
class ModelChoice:
    """A model picked in the picker.

    Attributes:
        name: shown while it loads (untrusted: a file or server name).
        label: identifies it (the resolved path, or the server's model id).
        path: the local GGUF file, or None.
        api_model: the server's model id, or None.
    """

    name: str
    label: str
    path: Path | None = None
    api_model: str | None = None


def file_label(path: Path) -> str:
    """What identifies a local model file: its resolved path (links followed)."""
    try:
        return str(path.expanduser().resolve())
    except (OSError, RuntimeError):
        return str(path.expanduser().absolute())


def model_folders(config: Config) -> list[Path]:
    """The folders the picker lists: ``models/``, the configured ``model_dirs``, and
    the folder of the ``--model`` file; each once."""
    folders = [project_models_dir(), *config.model_dirs]
    if config.model is not None:
        folders.append(config.model.expanduser().parent)
    out: list[Path] = []
    for folder in folders:
        if file_label(folder) not in {file_label(f) for f in out}:
            out.append(folder)
    return out


def current_label(config: Config, engine_label: str | None, info: ModelInfo | None) -> str | None:
    """The label of the model in use (see :attr:`ModelChoice.label`): the one a switch
    chose (``engine_label``), else the server's model or the run's file."""
    if engine_label is not None:
        return engine_label
    if config.api_base is not None:
        return config.api_model or (info.name if info else None)
    return file_label(config.model or default_model_path())


def engine_factory_for(
    config: Config, choice: ModelChoice, build: EngineFactory
) -> Callable[[], Engine]:
    """A factory for :meth:`ChatSession.switch_engine`: ``build`` with the run's config
    and the chosen model. The bundled default model is run as without ``--model``
    (with its empty system prompt: see :data:`tui_chat.paths.DEFAULT_MODEL_SYSTEM_PROMPT`).
    """
    if choice.api_model is not None:
        chosen = dataclasses.replace(config, api_model=choice.api_model)
    else:
        assert choice.path is not None
        is_default = file_label(choice.path) == file_label(default_model_path())
        chosen = dataclasses.replace(
            config, model=None if is_default else choice.path, api_base=None
        )
    return lambda: build(chosen)


def _params(n: int) -> str:
    if n <= 0:
        return ""
    if n >= 10**9:
        return f"{n / 10**9:.1f}B"
    return f"{n / 10**6:.0f}M" if n >= 10**6 else f"{n / 10**3:.0f}K"


def _size(n_bytes: int) -> str:
    if n_bytes >= 2**30:
        return f"{n_bytes / 2**30:.1f} GiB"
    if n_bytes >= 2**20:
        return f"{n_bytes / 2**20:.0f} MiB"
    return f"{n_bytes / 2**10:.0f} KiB" if n_bytes >= 2**10 else f"{n_bytes} B"


_LOCAL_COLUMNS = ("file", "arch", "params", "quant", "size", "ctx", "tmpl")
"""The local picker's columns, in the order :meth:`ModelPickerScreen._found` fills them."""
_REMOTE_COLUMNS = ("model", "owned by", "ctx")
"""The server picker's columns, in the order :meth:`ModelPickerScreen._listed` fills them."""


def _cell(text: str, limit: int = 0, style: str = "") -> Text:
    """A table cell: sanitized, never markup, cut to ``limit`` characters."""
    shown = sanitize(text)
    if limit and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return Text(shown, style=style, no_wrap=True, overflow="ellipsis")


class ModelPickerScreen(ModalScreen[ModelChoice | None]):
    """Lists models and returns the chosen one (None: Esc).

    Args:
        config: the run's settings (``api_base``, ``model_dirs``, ``n_gpu_layers``).
        current: the label of the model in use (marked ●), or None.
    """

    DEFAULT_CSS = """
    ModelPickerScreen {
        align: center middle;
    }
    ModelPickerScreen > #models-box {
        width: 100%;
        max-width: 110;
        height: 100%;
        max-height: 30;
        border: round $primary;
        border-title-color: $text;
        padding: 0 1;
        background: $surface;
    }
    ModelPickerScreen #where {
        color: $text-muted;
        height: auto;
        max-height: 2;
    }
    ModelPickerScreen DataTable {
        height: 1fr;
    }
    ModelPickerScreen #detail {
        height: 3;
        color: $text;
    }
    ModelPickerScreen #detail.-problem {
        color: $text-warning;
    }
    ModelPickerScreen #keys {
        color: $text-muted;
        height: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Close"),
        Binding("r", "rescan", "Read again"),
    ]

    class Found(Message, bubble=False):
        """A local file was read (posted by the scan worker).

        Attributes:
            info: its description.
        """

        def __init__(self, info: ModelFileInfo) -> None:
            super().__init__()
            self.info = info

    class Listed(Message, bubble=False):
        """The scan or the server's list has ended.

        Attributes:
            remote: the server's models (None for a local scan).
            problems: one line each: folders that could not be read, or the server's
                failure.
        """

        def __init__(self, remote: Sequence[RemoteModel] | None, problems: Sequence[str]) -> None:
            super().__init__()
            self.remote = remote
            self.problems = list(problems)

    def __init__(self, config: Config, current: str | None) -> None:
        super().__init__()
        self._config = config
        self._current = current
        self._rows: dict[str, ModelFileInfo | RemoteModel] = {}
        self.scanning = True
        """True until the files (or the server's list) have been read (reading starts
        when the screen is mounted)."""

    # ----------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        remote = self._config.api_base is not None
        with Vertical(id="models-box") as box:
            box.border_title = "Models on the server" if remote else "Models"
            yield Static("", id="where", markup=False)
            yield DataTable(cursor_type="row", zebra_stripes=True, id="models")
            yield Static("", id="detail", markup=False)
            yield Static("Enter load · ↑↓ move · r read again · Esc close", id="keys", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        remote = self._config.api_base is not None
        labels = _REMOTE_COLUMNS if remote else _LOCAL_COLUMNS
        for label in labels:
            table.add_column(label, width=len(label))  # widened by _add_row
        table.focus()
        self.action_rescan()

    @property
    def table(self) -> DataTable[Text]:
        """The list of models."""
        return self.query_one(DataTable)

    def rows(self) -> list[ModelFileInfo | RemoteModel]:
        """What is listed, in order (local file descriptions or the server's models)."""
        return list(self._rows.values())

    # ---------------------------------------------------------------- reading
    def action_rescan(self) -> None:
        """r: read the folders (or the server's list) again."""
        self.table.clear()
        self._rows.clear()
        self.scanning = True
        if self._config.api_base is not None:
            where = f"{self._config.api_base}: asking for its models…"
            self.query_one("#where", Static).update(sanitize(where))
            self._list_remote(self._config)
        else:
            folders = model_folders(self._config)
            shown = ", ".join(str(f) for f in folders)
            self.query_one("#where", Static).update(sanitize(f"Reading {shown}…"))
            memory = total_memory_bytes() if self._config.n_gpu_layers == 0 else None
            self._scan(folders, memory)

    @work(
        thread=True,
        group="model-list",
        exclusive=True,
        exit_on_error=False,
        description="reading the headers of the model files",
    )
    def _scan(self, folders: list[Path], memory_bytes: int | None) -> None:
        """Thread: list the folders, describe each file, post each as it is read."""
        from textual.worker import get_current_worker

        worker = get_current_worker()
        files, problems = list_model_files(folders)
        for path in files:
            if worker.is_cancelled:
                return
            self.post_message(self.Found(describe_model_file(path, memory_bytes=memory_bytes)))
        self.post_message(self.Listed(None, problems))

    @work(
        thread=True,
        group="model-list",
        exclusive=True,
        exit_on_error=False,
        description="asking the server for its models",
    )
    def _list_remote(self, config: Config) -> None:
        """Thread: ``GET {api_base}/models``."""
        from tui_chat.engine.remote import list_models

        assert config.api_base is not None
        try:
            models = list_models(config.api_base, api_key=config.api_key)
        except EngineError as exc:
            self.post_message(self.Listed([], [str(exc)]))
            return
        self.post_message(self.Listed(models, []))

    def _add_row(self, key: str, *cells: Text) -> None:
        """Add one row, first widening each column to hold its cell.

        Textual's DataTable measures new cells only when it is next idle, and a frame
        drawn before that caches the cells cut to the old width for good (a picker
        under load showed "● al…" for "● alpha"). Fixed widths set here, in the same
        handler as the row, leave no frame in between.
        """
        for column, cell in zip(self.table.ordered_columns, cells, strict=True):
            column.width = max(column.width, cell.cell_len)
        self.table.add_row(*cells, key=key)

    @on(Found)
    def _found(self, message: Found) -> None:
        info = message.info
        key = str(len(self._rows))
        self._rows[key] = info
        dim = "" if info.usable else "dim"
        current = self._current is not None and file_label(info.path) == self._current
        mark = "●" if current else ("✗" if not info.usable else " ")
        self._add_row(
            key,
            _cell(f"{mark} {info.path.name.removesuffix('.gguf')}", 30, dim),
            _cell(info.architecture or "-", 8, dim),
            _cell(_params(info.n_params), 0, dim),
            _cell(info.quantisation, 8, dim),
            _cell(_size(info.size_bytes), 0, dim),
            _cell(str(info.n_ctx_train) if info.n_ctx_train else "", 0, dim),
            _cell(("yes" if info.has_chat_template else "no") if info.architecture else "", 0, dim),
        )
        if current:
            self.table.move_cursor(row=len(self._rows) - 1)
        if len(self._rows) == 1 or current:
            self._show_detail(key)

    @on(Listed)
    def _listed(self, message: Listed) -> None:
        self.scanning = False
        where = self.query_one("#where", Static)
        if message.remote is not None:
            for model in message.remote:
                key = str(len(self._rows))
                self._rows[key] = model
                current = model.id == self._current
                self._add_row(
                    key,
                    _cell(f"{'●' if current else ' '} {model.id}", 50),
                    _cell(model.owned_by, 16),
                    _cell(str(model.n_ctx) if model.n_ctx else ""),
                )
                if current:
                    self.table.move_cursor(row=len(self._rows) - 1)
            n = len(message.remote)
            text = f"{self._config.api_base}: {n} model{'s' if n != 1 else ''}"
        else:
            n = len(self._rows)
            usable = sum(
                1 for r in self._rows.values() if isinstance(r, ModelFileInfo) and r.usable
            )
            folders = ", ".join(str(f) for f in model_folders(self._config))
            text = f"{n} files, {usable} usable, in {folders}"
        if message.problems:
            text += " · " + "; ".join(message.problems)
        where.update(sanitize(text))
        if self._rows:
            self._show_detail(self._key_at_cursor())
        else:
            self.query_one("#detail", Static).update("nothing to pick")

    # ---------------------------------------------------------------- choosing
    def _key_at_cursor(self) -> str:
        row = self.table.cursor_row
        keys = list(self._rows)
        return keys[row] if 0 <= row < len(keys) else keys[0]

    def _show_detail(self, key: str) -> None:
        detail = self.query_one("#detail", Static)
        row = self._rows.get(key)
        if row is None:
            return
        if isinstance(row, ModelFileInfo):
            if row.problem is not None:
                text = f"✗ cannot be used: {row.problem}\n{row.path}"
            else:
                text = (
                    f"{row.name}\n{row.path}\nEnter loads it (the model in use is unloaded first)"
                )
            detail.set_class(row.problem is not None, "-problem")
        else:
            text = f"{row.id}\nEnter switches to it"
            detail.set_class(False, "-problem")
        detail.update(sanitize(text))

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._show_detail(event.row_key.value)

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        row = self._rows.get(key) if key is not None else None
        if row is None:
            return
        if isinstance(row, ModelFileInfo):
            if not row.usable:
                self.app.bell()
                self._show_detail(key or "")
                return
            self.dismiss(ModelChoice(row.path.stem, file_label(row.path), path=row.path))
        else:
            self.dismiss(ModelChoice(row.id, row.id, api_model=row.id))

    def action_cancel(self) -> None:
        """Esc: close, nothing changes."""
        self.dismiss(None)
