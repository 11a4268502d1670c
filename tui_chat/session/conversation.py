"""The conversation as data: its messages, the versions of its last reply, and the rules
of the turn actions. No threads, no locks, no I/O: :class:`~tui_chat.session.ChatSession`
holds one :class:`Conversation` under its lock and calls these methods; the tests call
them as plain functions.

Every message has a *key*, an int unique within its conversation, that names it to the
saving part (:mod:`tui_chat.session.saving`) without sharing any object with the
storage thread: the history's row ids stay on that thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tui_chat.engine.base import ChatMessage
from tui_chat.history.store import LoadedConversation, StoredVersion
from tui_chat.session.events import ReplyKind


def prompt_messages(conversation: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages to send to the model for ``conversation``.

    A user message can be left without a reply (the reply was empty, failed before any
    text, or was stopped before its first token); the next message then follows it
    directly. Chat templates expect user and assistant turns to alternate (many Jinja
    templates raise on two user turns in a row), so consecutive user messages are sent
    as one, joined by a blank line. Nothing is dropped.
    """
    out: list[ChatMessage] = []
    for message in conversation:
        if out and message["role"] == "user" and out[-1]["role"] == "user":
            merged: ChatMessage = {
                "role": "user",
                "content": f"{out[-1]['content']}\n\n{message['content']}",
            }
            out[-1] = merged
        else:
            out.append(message)
    return out


def with_system_prompt(
    conversation: Sequence[ChatMessage], system_prompt: str | None
) -> list[ChatMessage]:
    """``conversation`` with its leading system message replaced by ``system_prompt``
    (removed when that is None or empty); a new list, the messages are not changed."""
    rest = list(conversation)
    if rest and rest[0]["role"] == "system":
        rest = rest[1:]
    if system_prompt:
        return [{"role": "system", "content": system_prompt}, *rest]
    return rest


def as_version(n: int, user: ChatMessage, reply: ChatMessage) -> StoredVersion:
    """Version ``n`` of a reply: the question ``user`` and the answer ``reply`` (with its
    thinking and model)."""
    return StoredVersion(
        n,
        user["content"],
        reply["content"],
        bool(reply.get("interrupted")),
        reply.get("reasoning", ""),
        reply.get("model", ""),
    )


def reply_of(version: StoredVersion) -> ChatMessage:
    """The assistant message of a stored version (its thinking and model kept)."""
    message: ChatMessage = {"role": "assistant", "content": version.content}
    if version.reasoning:
        message["reasoning"] = version.reasoning
    if version.model:
        message["model"] = version.model
    if version.interrupted:
        message["interrupted"] = True
    return message


@dataclass(frozen=True)
class Turn:
    """What one request did to the conversation, and what its reply needs.

    Attributes:
        kind: the request (see :data:`~tui_chat.session.events.ReplyKind`).
        prompt: the messages the model is sent (system prompt applied, user turns
            merged; for ``continue`` it ends with the reply carried on).
        reply_key: the key the reply is saved under (a new one for ``send``; the
            replaced reply's for the turn actions, which rewrite that row).
        user_key: the key of the user message the reply answers, if any.
        unsaved: the messages before the reply, with their keys, that a new
            conversation must save first (all of them; the saving part skips those
            already saved).
        prefix: for ``continue``, the text carried on.
        replaced: for the turn actions, the reply taken out (put back if nothing new
            comes).
        replaced_user: for ``edit``, the question before the edit.
        kept: for ``regenerate`` and ``edit``, the replaced reply as a stored version.
        version: the number of the version the reply becomes.
        edited: for ``edit``, the new question.
        prefix_reasoning: for ``continue``, the thinking of the reply carried on (the
            new thinking, if any, is added to it).
    """

    kind: ReplyKind
    prompt: list[ChatMessage]
    reply_key: int
    user_key: int | None
    unsaved: tuple[tuple[ChatMessage, int], ...]
    prefix: str = ""
    replaced: ChatMessage | None = None
    replaced_user: str | None = None
    kept: StoredVersion | None = None
    version: int = 1
    edited: str | None = None
    prefix_reasoning: str = ""

    @property
    def started_with(self) -> str:
        """The text the reply's view starts from: the prefix of a ``continue``, the new
        question of an ``edit``, else nothing."""
        if self.kind == "continue":
            return self.prefix
        return self.edited if self.edited is not None else ""


@dataclass(frozen=True)
class Finished:
    """How a reply's end changed the conversation (:meth:`Conversation.finish`).

    Attributes:
        text: the whole reply (the prefix of a ``continue`` included).
        empty: nothing but whitespace came: no reply joins the conversation.
        interrupted: stopped or failed; the text so far is kept, marked.
        unanswerable: it failed before any text on a new message: that message left
            the conversation too (replay case C18).
        message: the assistant message added, or None.
        restored: for a turn action that brought nothing, the stored version put back
            (to show again), or None.
    """

    text: str
    empty: bool
    interrupted: bool
    unanswerable: bool
    message: ChatMessage | None
    restored: StoredVersion | None


@dataclass(frozen=True)
class VersionChange:
    """Another version of the last reply was made the one shown (:meth:`Conversation.show`).

    Attributes:
        chosen: the version now in the conversation.
        previous: the version it replaced, as it stood.
        reply_key: the key of the last reply.
        user_key: the key of the question it answers.
        count: how many versions there are.
    """

    chosen: StoredVersion
    previous: StoredVersion
    reply_key: int
    user_key: int
    count: int


@dataclass
class Conversation:
    """Messages, their keys, and the versions of the last reply.

    Attributes:
        messages: system, user and assistant messages, oldest first (raw text).
        keys: the key of each message, same order.
        versions: every version of the last reply (empty: it has only one).
        version: the number of the one in ``messages`` (0 while ``versions`` is empty).
    """

    messages: list[ChatMessage] = field(default_factory=list)
    keys: list[int] = field(default_factory=list)
    versions: list[StoredVersion] = field(default_factory=list)
    version: int = 0
    _next_key: int = 0

    @classmethod
    def new(cls, system_prompt: str | None) -> Conversation:
        """An empty conversation, starting with ``system_prompt`` when it is set."""
        conversation = cls()
        if system_prompt:
            conversation._add({"role": "system", "content": system_prompt})
        return conversation

    @classmethod
    def loaded(cls, saved: LoadedConversation) -> Conversation:
        """A saved conversation as :meth:`~tui_chat.history.store.Store.load` read it;
        its keys are 0, 1, ... in the order of ``saved.message_ids``."""
        conversation = cls()
        for message in saved.messages:
            conversation._add(dict(message))  # type: ignore[arg-type]
        conversation.versions = list(saved.versions)
        conversation.version = saved.version if saved.versions else 0
        return conversation

    def _new_key(self) -> int:
        self._next_key += 1
        return self._next_key - 1

    def _add(self, message: ChatMessage, key: int | None = None) -> int:
        key = self._new_key() if key is None else key
        self.messages.append(message)
        self.keys.append(key)
        return key

    def shown_version(self) -> tuple[int, int]:
        """(the version of the last reply shown, how many there are); (1, 1) for a reply
        never regenerated, and for no reply."""
        return (self.version, len(self.versions)) if self.versions else (1, 1)

    def copy_messages(self) -> list[ChatMessage]:
        """The messages as copies, for a reader on another thread."""
        return [dict(m) for m in self.messages]  # type: ignore[misc]

    def refusal(self, kind: ReplyKind) -> str | None:
        """Why the turn action ``kind`` has nothing to act on, or None (``send`` always
        has)."""
        roles = [m["role"] for m in self.messages]
        if kind == "send":
            return None
        if kind == "continue":
            return None if roles and roles[-1] == "assistant" else "there is no reply to continue"
        if "user" in roles[-2:]:
            return None
        return "there is no message to " + ("reply to again" if kind == "regenerate" else "edit")

    def take(self, kind: ReplyKind, text: str, system_prompt: str | None) -> Turn:
        """Apply a request to the conversation and say what its reply needs.

        ``send`` adds the user message ``text``; ``regenerate`` takes the last reply out
        (kept as a version); ``edit`` also replaces the last question by ``text``;
        ``continue`` takes the last reply out to carry it on. The caller has checked
        :meth:`refusal` (a refused action raises ``IndexError`` here).
        """
        if kind == "send":
            return self._send(text, system_prompt)
        if kind == "continue":
            return self._carry_on(system_prompt)
        return self._redo(kind, text, system_prompt)

    def _unsaved(self) -> tuple[tuple[ChatMessage, int], ...]:
        return tuple(zip(self.messages, self.keys, strict=True))

    def _send(self, text: str, system_prompt: str | None) -> Turn:
        user_key = self._add({"role": "user", "content": text})
        self.versions, self.version = [], 0
        return Turn("send", self.prompt(system_prompt), self._new_key(), user_key, self._unsaved())

    def _carry_on(self, system_prompt: str | None) -> Turn:
        replaced = self.messages.pop()
        reply_key = self.keys.pop()
        prefix = replaced["content"]
        thinking = replaced.get("reasoning", "")
        prompt = self.prompt(system_prompt)
        carried: ChatMessage = {"role": "assistant", "content": prefix}
        if thinking and not prefix.strip():
            # Cut while thinking: carry on inside the thinking (the engine ends the
            # prompt inside it), not in a second block.
            carried["reasoning"] = thinking
        prompt.append(carried)
        last_is_user = bool(self.messages) and self.messages[-1]["role"] == "user"
        return Turn(
            "continue",
            prompt,
            reply_key,
            self.keys[-1] if last_is_user else None,
            self._unsaved(),
            prefix=prefix,
            replaced=replaced,
            version=self.version or 1,
            prefix_reasoning=thinking,
        )

    def _redo(self, kind: ReplyKind, text: str, system_prompt: str | None) -> Turn:
        """``regenerate`` or ``edit``: the last reply (if any) becomes a kept version."""
        replaced: ChatMessage | None = None
        reply_key = None
        if self.messages and self.messages[-1]["role"] == "assistant":
            replaced = self.messages.pop()
            reply_key = self.keys.pop()
        user = self.messages[-1]
        kept: StoredVersion | None = None
        version = 1
        if replaced is not None:
            if not self.versions:
                self.versions, self.version = [as_version(1, user, replaced)], 1
            kept = as_version(self.version, user, replaced)
            self.versions[self.version - 1] = kept
            version = len(self.versions) + 1
        replaced_user = edited = None
        if kind == "edit":
            replaced_user, edited = user["content"], text
            self.messages[-1] = {"role": "user", "content": text}
        return Turn(
            kind,
            self.prompt(system_prompt),
            self._new_key() if reply_key is None else reply_key,
            self.keys[-1],
            self._unsaved(),
            replaced=replaced,
            replaced_user=replaced_user,
            kept=kept,
            version=version,
            edited=edited,
        )

    def finish(
        self, turn: Turn, text: str, reason: str, reasoning: str = "", model: str = ""
    ) -> Finished:
        """Put the reply of ``turn`` into the conversation.

        Args:
            turn: what :meth:`take` returned for it.
            text: the answer the engine made (without a ``continue``'s prefix).
            reason: how the stream ended (``stop``, ``length``, ``cancelled``,
                ``error``...: :class:`~tui_chat.engine.stream.StreamResult`).
            reasoning: its thinking, apart ("" for none). A reply that is only
                thinking (cut by ``max_tokens`` while thinking) is kept, not empty.
            model: the model that wrote it ("" when unknown).
        """
        text = turn.prefix + text
        reasoning = turn.prefix_reasoning + reasoning
        empty = not text.strip() and not reasoning.strip()
        interrupted = reason in ("cancelled", "error")
        # A message that failed before any reply (the prompt does not fit the context
        # window, the server refused it) leaves the context and the history: sent
        # again with the next message it would fail again (replay case C18).
        unanswerable = empty and reason == "error" and turn.replaced is None
        if unanswerable and self.messages and self.messages[-1]["role"] == "user":
            self.messages.pop()
            self.keys.pop()
        message: ChatMessage | None = None
        restored: StoredVersion | None = None
        if not empty:
            message = {"role": "assistant", "content": text}
            if reasoning:
                message["reasoning"] = reasoning
            if model:
                message["model"] = model
            if interrupted:
                message["interrupted"] = True
            self._add(message, turn.reply_key)
            if turn.kind in ("regenerate", "edit") and turn.replaced is not None:
                self.versions.append(as_version(turn.version, self.messages[-2], message))
                self.version = turn.version
            elif turn.kind == "continue" and self.versions:
                self.versions[self.version - 1] = as_version(
                    self.version, self.messages[-2], message
                )
        elif turn.replaced is not None:
            # Nothing new came (stopped before the first token, an empty reply, an
            # error): the reply that was there is put back as it was.
            if turn.replaced_user is not None:
                self.messages[-1] = {"role": "user", "content": turn.replaced_user}
            self._add(turn.replaced, turn.reply_key)
            restored = turn.kept
        return Finished(text, empty, interrupted, unanswerable, message, restored)

    def show(self, n: int) -> VersionChange | None:
        """Make version ``n`` (1-based) of the last reply, with the question it answered,
        the one in the conversation; None when there is no such version, it is shown
        already, or the conversation does not end with a reply."""
        if not 1 <= n <= len(self.versions) or n == self.version:
            return None
        if len(self.messages) < 2 or self.messages[-1]["role"] != "assistant":
            return None
        previous = as_version(self.version, self.messages[-2], self.messages[-1])
        self.versions[self.version - 1] = previous
        chosen = self.versions[n - 1]
        self.messages[-2] = {"role": "user", "content": chosen.user_content}
        self.messages[-1] = reply_of(chosen)
        self.version = n
        return VersionChange(chosen, previous, self.keys[-1], self.keys[-2], len(self.versions))

    def prompt(self, system_prompt: str | None) -> list[ChatMessage]:
        """What the model is sent for the conversation as it stands: its system message
        is ``system_prompt`` (the settings screen may have changed it since the saved
        system message was written), then :func:`prompt_messages`."""
        return prompt_messages(with_system_prompt(self.messages, system_prompt))
