"""The engine protocol and the events an engine yields.

An engine turns a conversation into a stream of raw token bytes. It never decodes
UTF-8, never looks for stop strings and never touches a UI: that is the job of
:mod:`tui_chat.engine.stream`, which is shared by every engine (llama.cpp, the scripted
fake, a trace replay), so the same decode and stop rules are tested once and hold for all.

Nothing in this package imports Textual or Rich (a test checks ``sys.modules``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypedDict

from tui_chat.engine.reasoning import PartKind, ThinkingFormat

Role = Literal["system", "user", "assistant"]


class ChatMessage(TypedDict, total=False):
    """One message of a conversation, as the chat template receives it.

    ``interrupted`` marks an assistant reply that the user stopped; its partial text is
    still sent to the model on the next turn (case C10 of the replay cases).
    ``reasoning`` is an assistant reply's thinking, apart from its answer (``content``);
    it is never sent back as answer text (issue 18). ``model`` names the model that
    wrote a reply ("" when unknown).
    """

    role: Role
    content: str
    interrupted: bool
    reasoning: str
    model: str


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings for one completion.

    The defaults suit a small instruct model such as the default SmolLM2 135M
    Instruct (Q4_1), asked "What is the capital of France?" (seeds 0-59, 40 tokens).
    With its template's own system prompt it named Paris 13 times in 20 at the old
    temperature 0.7 and top-p 0.95, and 49 in 60 at its model card's 0.2 and 0.9; with
    the default model's empty system prompt
    (:data:`tui_chat.paths.DEFAULT_MODEL_SYSTEM_PROMPT`), 59 in 60 at 0.2 and 60 in 60
    at 0.1. The misses start in French: the first token "La" has probability 0.23
    against "The" 0.50, which temperature 0.2 leaves at 2 % and 0.1 at 0.04 %. A mild
    repeat penalty keeps low temperatures from looping on one phrase, as greedy
    decoding (temperature 0) does with small models. For a base model such as Gemma 3
    270M, or for more varied text, pass a higher ``temperature`` (0.7).

    Attributes:
        max_tokens: most tokens to generate for one reply.
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus sampling mass, 0-1.
        top_k: keep the k most likely tokens; 0 disables.
        min_p: drop tokens below ``min_p`` x the top probability.
        repeat_penalty: penalty for recently seen tokens; 1.0 disables.
        seed: sampler seed; -1 picks a random one.
        reasoning_budget: most thinking tokens of one reply; -1 for no limit. The
            embedded engine then closes the thinking itself (see
            :data:`tui_chat.engine.reasoning.WRAP_UP`) and the answer follows.
        thinking: ``auto`` (the chat template's own default), ``on`` or ``off``: passed
            as the template's ``enable_thinking`` where it reads one (a server gets
            ``chat_template_kwargs``). A model that thinks although asked not to still
            has its thinking shown as thinking.
        reasoning_effort: ``default`` (the template's), ``low``, ``medium`` or ``high``:
            the template's ``reasoning_effort`` where it reads one (gpt-oss).
    """

    max_tokens: int = 512
    temperature: float = 0.1
    top_p: float = 0.9
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    seed: int = -1
    reasoning_budget: int = -1
    thinking: str = "auto"
    reasoning_effort: str = "default"


@dataclass(frozen=True)
class ModelInfo:
    """What the UI shows about a loaded model.

    Attributes:
        name: short display name (file name without ``.gguf``).
        n_ctx: context window in tokens; 0 when unknown (a remote server that does not
            say).
        chat_format: name of the chat template in use (``server`` for a remote
            engine: the server applies its own).
        architecture: ``general.architecture`` from the GGUF header ("" if unknown).
        n_gpu_layers: layers offloaded to the GPU (0 on CPU builds, and when the
            build has no GPU offload).
        n_layers: layers (blocks) of the model; 0 if unknown.
        notices: one-line warnings for the user about this load (the native log
            cannot be written, GPU offload asked of a build without it, a chat
            template that could not be used). They may quote the model file: show
            them through the sanitiser.
        continue_refused: why a reply cannot be carried on (Ctrl+G) with this engine,
            as one line for the user; None when it can. A server that starts a new
            reply after a final assistant message sets it (llama-cpp-python's
            ``llama_cpp.server``, issue 19).
        thinking_switches: which of :attr:`SamplingParams.thinking` and
            :attr:`SamplingParams.reasoning_effort` take effect with this model
            (``thinking``, ``reasoning_effort``); a remote engine cannot know and
            offers both.
    """

    name: str
    n_ctx: int
    chat_format: str
    architecture: str = ""
    n_gpu_layers: int = 0
    n_layers: int = 0
    notices: tuple[str, ...] = ()
    continue_refused: str | None = None
    thinking_switches: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrefillDone:
    """The prompt is in the KV cache; decode steps follow.

    Attributes:
        n_prompt_tokens: length of the whole prompt in tokens.
        n_evaluated: prompt tokens actually evaluated in this prefill (the rest were
            reused from the KV cache by prefix match).
        prefill_ms: wall time of the prefill in milliseconds.
        trimmed_messages: number of oldest messages dropped to fit ``n_ctx``.
        notices: one-line warnings for the user about this prompt, each said once per
            load (a chat template that could not render the conversation). They may
            quote the model file: show them through the sanitiser.
        thinking: the tags the reply's thinking is between (from the chat template),
            or None when the text is not to be split.
        thinking_open: the prompt opened the thinking (the template's generation
            prompt ends with the opening tag): the reply starts as thinking.
    """

    n_prompt_tokens: int
    n_evaluated: int
    prefill_ms: float
    trimmed_messages: int = 0
    notices: tuple[str, ...] = ()
    thinking: ThinkingFormat | None = None
    thinking_open: bool = False


@dataclass(frozen=True)
class PrefillProgress:
    """Progress of a prefill that spans more than one prompt batch (issue 13).

    Yielded before the first batch (``n_done == 0``) and after each batch, before
    :class:`PrefillDone`. The last prompt token is evaluated together with the first
    decode step, so the last progress event has ``n_done == n_total - 1``; the next
    event is :class:`PrefillDone`.

    Attributes:
        n_done: prompt tokens evaluated so far in this prefill.
        n_total: prompt tokens this prefill evaluates (tokens reused from the KV cache
            are not counted); equals the coming ``PrefillDone.n_evaluated``.
        elapsed_ms: wall time since the first batch started, in milliseconds.
        n_reused: prompt tokens taken from the KV cache, not evaluated.
    """

    n_done: int
    n_total: int
    elapsed_ms: float
    n_reused: int = 0

    @property
    def eta_ms(self) -> float | None:
        """Estimated time left in milliseconds, from the rate so far (None before the
        first batch ends). Linear: later batches attend to more tokens and run a little
        slower, so this leans optimistic near the start of a long prefill."""
        if self.n_done <= 0 or self.elapsed_ms <= 0:
            return None
        return (self.n_total - self.n_done) * self.elapsed_ms / self.n_done


@dataclass(frozen=True)
class TokenPiece:
    """One sampled token as the bytes llama.cpp's token-to-piece gives.

    ``data`` may hold part of a UTF-8 character (or the end of one and the start of the
    next); :class:`~tui_chat.engine.decode.StreamDecoder` reassembles them.
    ``eog`` marks an end-of-generation token (end of turn, EOS): its bytes are never
    shown and generation ends there.

    Attributes:
        data: raw bytes of the piece.
        eog: True for an end-of-generation token, or another token the reply ends at.
        step_ms: duration of the decode step that produced it, in milliseconds.
        control: the spelled-out text of a control token the reply ended at although it
            is not end-of-generation (one that opens a new turn: ``<|im_start|>``);
            "" otherwise. Only the trace records it.
        part: None for text the streaming core splits by the thinking tags itself;
            ``reasoning`` or ``answer`` for text the engine already knows the kind of
            (a server's ``reasoning_content``).
        injected: text the engine put in the reply itself, not sampled (the wrap-up
            that closes the thinking at the budget); not a decode step.
    """

    data: bytes
    eog: bool = False
    step_ms: float = 0.0
    control: str = ""
    part: PartKind | None = None
    injected: bool = False


EngineEvent = PrefillProgress | PrefillDone | TokenPiece

LoadProgressFn = Callable[[float], bool]
"""A load's progress callback (see :meth:`Engine.load`): takes the fraction loaded
(0.0-1.0), returns False to stop the load."""


@dataclass(frozen=True)
class Step:
    """One scripted token, for engines that play a script or a recording.

    Attributes:
        at_s: seconds after decoding starts when the token is produced.
        data: the token's raw bytes.
        eog: an end-of-generation token (its bytes are ignored).
    """

    at_s: float
    data: bytes = b""
    eog: bool = False


class EngineError(Exception):
    """A clear, user-facing engine failure (bad model file, context overflow...).

    The message is one line meant for the user; the app shows it and stays up.
    """


class LoadCancelled(EngineError):
    """The load was stopped on purpose: the ``on_progress`` callback given to
    :meth:`Engine.load` returned False (the session is closing: Ctrl+Q or SIGTERM
    during a load). Not a failure of the model; nothing needs to be shown."""


class ContextOverflowError(EngineError):
    """The newest message alone does not fit in the context window.

    Attributes:
        n_prompt_tokens: tokens the prompt needs.
        n_ctx: the context window in tokens.
    """

    def __init__(self, n_prompt_tokens: int, n_ctx: int, n_reserved: int) -> None:
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(
            f"The prompt needs {n_prompt_tokens} tokens but the context window is "
            f"{n_ctx} tokens ({n_reserved} kept free for the reply). Shorten the "
            f"message or start with a larger --n-ctx."
        )


@dataclass
class CancelToken:
    """A cancel flag shared by the UI and the engine thread.

    The engine checks :meth:`is_set` once per decode step and once per prompt batch, so
    a cancel is honoured within one step. An engine that can block for longer (the
    remote engine waits on the network) registers a callback with :meth:`on_set` that
    unblocks it.
    """

    _event: threading.Event = field(default_factory=threading.Event)
    requested_at: float | None = None
    _answer_now: threading.Event = field(default_factory=threading.Event, repr=False)
    _callbacks: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def set(self, now: float | None = None) -> None:
        """Request cancellation; ``now`` is a ``time.perf_counter()`` stamp.

        Runs the callbacks registered with :meth:`on_set` on this thread (the UI's, for
        Esc), once each.
        """
        with self._lock:
            if self.requested_at is None:
                self.requested_at = time.perf_counter() if now is None else now
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once when the token is set (at once if it already is).

        The callback runs on the thread that calls :meth:`set`, usually the UI's event
        loop, so it must be quick, must not block and must not raise (closing a socket
        is the intended use).

        Returns:
            A function that unregisters the callback (a no-op once it has run).
        """
        with self._lock:
            run_now = self._event.is_set()
            if not run_now:
                self._callbacks.append(callback)
        if run_now:
            callback()

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def is_set(self) -> bool:
        """True once cancellation was requested."""
        return self._event.is_set()

    def answer_now(self) -> None:
        """Ask the engine to close the thinking at the next decode step and answer
        (the "answer now" key); the reply goes on. Any thread."""
        self._answer_now.set()

    @property
    def answer_requested(self) -> bool:
        """True once :meth:`answer_now` was called."""
        return self._answer_now.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` seconds, waking early on cancel; True if cancelled."""
        return self._event.wait(timeout_s)


class Engine(Protocol):
    """What the UI and headless mode need from an engine.

    All methods except :attr:`stop_strings` and :attr:`info` run on the engine thread
    only; an engine is never entered by two threads at once.
    """

    @property
    def info(self) -> ModelInfo | None:
        """The loaded model, or None before :meth:`load`."""
        ...

    @property
    def stop_strings(self) -> Sequence[str]:
        """Strings that end a reply when the model writes them (turn markers)."""
        ...

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        """Load the model (blocking, seconds; a minute for a 40 GB model on a GPU).

        Args:
            on_progress: called on the loading thread with the fraction of the model
                loaded so far (0.0-1.0, never decreasing; the last call, if the load
                gets there, is 1.0); it must be quick and must not block. Returning
                False stops the load at the next report (:class:`LoadCancelled`). An
                engine with nothing to load (a remote server, a replay) may never call
                it.

        Raises:
            LoadCancelled: ``on_progress`` returned False.
            EngineError: the model cannot be loaded; the message says why.
        """
        ...

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        """Yield one :class:`PrefillDone`, then :class:`TokenPiece` per decode step.

        An engine may yield :class:`PrefillProgress` events before ``PrefillDone``
        during a long prefill.

        When the last of ``messages`` is an assistant message, the reply continues it
        (a reply that was stopped or cut): the prompt ends inside that message, with no
        end-of-turn glue, and only the new tokens are yielded.

        Stops by itself after ``params.max_tokens`` tokens or an end-of-generation
        token; the caller may also stop iterating at any time. Returns soon after
        ``cancel`` is set (within one decode step or one prompt batch).

        Raises:
            ContextOverflowError: the newest message does not fit in ``n_ctx``.
            EngineError: any other clear failure.
        """
        ...

    def close(self) -> None:
        """Free the model. Safe to call twice."""
        ...
