"""Export a saved conversation as Markdown or JSON (``tui-chat export``, and the app).

UI-free: the app runs :func:`export_conversation` on the storage thread and writes the
file off the event loop; the CLI runs it directly.

- **Markdown** is for reading: a title, the model and dates, then each message under a
  heading; a reply's heading names the model that wrote it, when known. A reply's
  thinking comes before its answer as a blockquote that starts with the line
  ``**Thinking**`` (every line quoted, so nothing in the thinking can end the quote
  early, as a ``</details>`` in it could end an HTML ``<details>`` block). Text is
  made inert as on screen (:func:`~tui_chat.sanitize.sanitize`): control and escape
  characters show as visible symbols, so ``cat`` of the file cannot drive a terminal.
- **JSON** is the record: the exact text of every message (and of the other versions
  of the last reply): ``content`` (a reply's answer), ``reasoning`` (its thinking,
  ``""`` for none) and, for replies, ``model`` (null when unknown). Every control
  character, DEL, C1 control and bidirectional override is written as a ``\\uXXXX``
  escape, so the file stays inert in a terminal and reads back to the same text.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tui_chat.engine.base import ChatMessage
from tui_chat.history.store import ConversationSummary, LoadedConversation, Store, one_line
from tui_chat.sanitize import sanitize

ExportFormat = Literal["md", "json"]
FORMATS: tuple[ExportFormat, ...] = ("md", "json")
JSON_FORMAT_NAME = "tui-chat-conversation"
JSON_FORMAT_VERSION = 1
"""Raised when a field changes meaning or goes; fields are only added within a version
(``reasoning`` and ``model`` were, for issue 18), so a reader ignores what it does not
know."""

_ROLE_HEADINGS = {"system": "System", "user": "You", "assistant": "Assistant"}
# json.dumps(ensure_ascii=False) escapes C0 controls but leaves these raw.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class ExportError(Exception):
    """The conversation cannot be exported (there is none with that id); one line."""


def format_for(path: Path) -> ExportFormat:
    """The format a file name asks for: ``.json`` is JSON, anything else Markdown."""
    return "json" if path.suffix.lower() == ".json" else "md"


def default_file_name(conversation_id: int, fmt: ExportFormat) -> str:
    """``tui-chat-<id>.md`` or ``tui-chat-<id>.json``."""
    return f"tui-chat-{conversation_id}.{fmt}"


def export_conversation(store: Store, conversation_id: int, fmt: ExportFormat) -> str:
    """The text of conversation ``conversation_id`` in ``fmt``.

    Raises:
        ExportError: there is no such conversation.
    """
    summary = store.conversation(conversation_id)
    loaded = store.load(conversation_id)
    if summary is None or loaded is None:
        raise ExportError(f"there is no saved conversation {conversation_id}")
    if fmt == "json":
        return to_json(summary, loaded)
    return to_markdown(summary, loaded)


def _local(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="seconds")


def to_markdown(summary: ConversationSummary, loaded: LoadedConversation) -> str:
    """A Markdown document of the conversation (text made inert, see the module)."""
    title = sanitize(one_line(summary.title, 200)) or f"Conversation {summary.id}"
    lines = [
        f"# {title}",
        "",
        f"- conversation: {summary.id}",
        f"- model: {sanitize(summary.model) or 'unknown'}",
        f"- started: {_local(summary.created_at)}",
        f"- last message: {_local(summary.updated_at)}",
        "",
    ]
    last = len(loaded.messages) - 1
    for i, message in enumerate(loaded.messages):
        heading = _ROLE_HEADINGS.get(message["role"], message["role"])
        notes = []
        if message["role"] == "assistant" and message.get("model"):
            notes.append(sanitize(one_line(message.get("model", ""), 80)))
        if i == last and loaded.versions:
            notes.append(f"version {loaded.version} of {len(loaded.versions)}")
        if notes:
            heading += f" ({'; '.join(notes)})"
        lines += [f"## {heading}", ""]
        lines += thinking_block(message.get("reasoning", ""))
        lines += [sanitize(message["content"]).rstrip("\n"), ""]
        if message.get("interrupted"):
            lines += ["*(interrupted)*", ""]
    return "\n".join(lines)


def thinking_block(reasoning: str) -> list[str]:
    """The lines of a reply's thinking in Markdown: a blockquote that starts with
    ``**Thinking**``, each line quoted, then a blank line; none when there is none."""
    text = sanitize(reasoning).strip("\n")
    if not text.strip():
        return []
    quoted = [f"> {line}" if line else ">" for line in text.split("\n")]
    return ["> **Thinking**", ">", *quoted, ""]


def to_json(summary: ConversationSummary, loaded: LoadedConversation) -> str:
    """A JSON document of the conversation (exact text, escaped; see the module)."""
    data: dict[str, Any] = {
        "format": JSON_FORMAT_NAME,
        "version": JSON_FORMAT_VERSION,
        "id": summary.id,
        "title": summary.title,
        "renamed": summary.renamed,
        "model": summary.model,
        "created_at": _iso(summary.created_at),
        "updated_at": _iso(summary.updated_at),
        "messages": [_json_message(m) for m in loaded.messages],
    }
    if loaded.versions:
        data["last_reply_version"] = loaded.version
        data["last_reply_versions"] = [
            {
                "n": v.n,
                "user_content": v.user_content,
                "content": v.content,
                "interrupted": v.interrupted,
                "reasoning": v.reasoning,
                "model": v.model or None,
            }
            for v in loaded.versions
        ]
    text = json.dumps(data, ensure_ascii=False, indent=2)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def _json_message(message: ChatMessage) -> dict[str, Any]:
    """One message of the JSON export: ``model`` only on replies (null when unknown)."""
    out: dict[str, Any] = {
        "role": message["role"],
        "content": message["content"],
        "interrupted": bool(message.get("interrupted")),
        "reasoning": message.get("reasoning", ""),
    }
    if message["role"] == "assistant":
        out["model"] = message.get("model") or None
    return out


def write_export(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (``~`` expanded; a relative path is taken from the
    current folder); returns the absolute path written.

    Raises:
        OSError: the file cannot be written (the message names the path).
    """
    target = path.expanduser()
    if not target.is_absolute():
        target = Path.cwd() / target
    target.write_text(text, encoding="utf-8")
    return target
