"""The embedded llama.cpp engine (llama-cpp-python): load, template, prefill, decode, cancel.

One :class:`LlamaEngine` owns one ``llama_cpp.Llama``; only the engine thread calls it,
and a lock makes a second caller fail loudly instead of corrupting the KV cache.

Prefill is fed in ``n_batch`` chunks with a cancel check between chunks, so Esc during
a long prompt is honoured within one prompt batch (replay case C08). Decode checks
the cancel flag once per step.

Special tokens come only from the chat template's glue: message content is tokenised
as plain text (:mod:`tui_chat.engine.prompt`), and the prompt starts with exactly one
BOS token when the model wants one (issue 8).

KV cache reuse across turns: the engine remembers the prompt parts and tokens it fed
for the previous prompt and reply, with a mark at each message boundary
(:mod:`tui_chat.engine.splice`). When the new prompt starts with the parts up to a mark
(the usual case: history plus a new message), its tokens are the tokens up to that mark
plus the tokens of the remaining parts alone, so re-tokenising the earlier reply can
never move a token boundary and waste the cache (case C20). Then only tokens after the
longest common prefix with the KV cache are evaluated. Regenerating or editing a turn
reuses the KV cache up to the boundary before that turn (llama.cpp's ``seq_rm`` drops
the rest).

KV snapshots (issue 13): the engine offers the native half, and
:mod:`tui_chat.history.kvcache` does the rest (files, header, checks, the cache folder).
:meth:`LlamaEngine.save_kv_state` writes the context state to a path with llama.cpp's
``llama_state_save_file``; :meth:`LlamaEngine.check_kv_state` refuses a state this
model cannot take; :meth:`LlamaEngine.load_kv_state` reads one back with
``llama_state_load_file``, then sets llama-cpp-python's view of the KV cache
(``input_ids``, ``n_tokens``) and the splice, so the next :meth:`generate` evaluates
only what is new, as on turn 2 of a chat that never stopped.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tui_chat.engine import sampling
from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    ContextOverflowError,
    EngineError,
    EngineEvent,
    LoadCancelled,
    LoadProgressFn,
    ModelInfo,
    PrefillDone,
    PrefillProgress,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.modelfile import (
    ModelFileError,
    ModelHeader,
    check_fits_in_memory,
    check_model_file,
    checked_metadata,
    fit_context,
    read_model_header,
    read_trained_context,
    total_memory_bytes,
)
from tui_chat.engine.prompt import Prompt, content, glue, normalize, tokenize_parts
from tui_chat.engine.reasoning import WRAP_UP, ThinkingFormat, ThinkingSplitter, starts_inside
from tui_chat.engine.splice import Mark, Splice
from tui_chat.engine.templates import ChatTemplate, RenderError, choose_template
from tui_chat.engine.turns import turn_openers

FLASH_ATTENTION = True
"""llama.cpp's flash attention. Its own tools default to "auto" (on where the backend
has it); llama-cpp-python 0.3.36 turns it off unless asked and has no "auto". On the
2-core machine a decode step of SmolLM2 is 8 % faster with it (llama-bench 133.5 vs
144.5 tokens/s): without it tui-chat could not keep up with llama-bench (issue 16)."""


class LlamaVocab:
    """A llama.cpp vocabulary as :class:`tui_chat.engine.prompt.Vocab` wants it."""

    def __init__(self, llm: Any, piece: Any) -> None:
        import llama_cpp

        self._llm = llm
        self._vocab = llm._model.vocab
        self._piece = piece
        self._get_attr = llama_cpp.llama_vocab_get_attr
        self._special_attrs = (
            llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
            | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
            | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        )
        self._control_attrs = (
            llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        )
        self._texts: dict[int, str | None] = {}
        self._glue_cache: dict[str, tuple[int, ...]] = {}

    def tokenize(self, text: str, special: bool) -> list[int]:
        """Tokens of ``text`` (no BOS); ``special`` parses special-token text.

        Template glue (``special=True``) is the same few strings turn after turn, so
        their tokens are kept (up to 256 strings) rather than computed every prompt.
        """
        if special and text in self._glue_cache:
            return list(self._glue_cache[text])
        tokens = list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=special))
        if special and len(self._glue_cache) < 256:
            self._glue_cache[text] = tuple(tokens)
        return tokens

    def special_text(self, token: int) -> str | None:
        """Text of a CONTROL, USER_DEFINED or UNKNOWN token; None for other tokens."""
        if token not in self._texts:
            text = None
            if self._get_attr(self._vocab, token) & self._special_attrs:
                text = self._piece(token, special=True).decode("utf-8", "replace")
            self._texts[token] = text
        return self._texts[token]

    def is_control(self, token: int) -> bool:
        """True for a token that plain text never yields (CONTROL or UNKNOWN)."""
        return bool(self._get_attr(self._vocab, token) & self._control_attrs)


class LlamaEngine:
    """llama-cpp-python engine for one GGUF model.

    Args:
        model: a GGUF file whose header the CLI read
            (:func:`~tui_chat.engine.modelfile.read_model_header`), or a path; either
            way :meth:`load` checks the whole file before the native load.
        n_ctx: context window in tokens (the loaded window once loaded).
        n_ctx_chosen: the user chose ``n_ctx``; when False (the run's default) it is
            lowered to what the model was trained for
            (:func:`~tui_chat.engine.modelfile.fit_context`).
        n_gpu_layers: layers to offload to the GPU; -1 offloads all (CUDA builds only,
            a CPU build ignores it).
        n_threads: CPU threads for decode; None lets llama-cpp-python choose (half
            the logical CPUs; tui-chat passes :func:`tui_chat.config.default_threads`).
        n_batch: prompt tokens evaluated per batch; also the cancel granularity of a
            prefill.
        chat_format: ``--chat-format`` override, or None to choose automatically.
        log_path: the file llama.cpp's native log lines go to (see
            :mod:`tui_chat.engine.native_log`); None keeps them in memory only. They
            never reach the terminal either way.
        default_system_prompt: the system message for a conversation that has none,
            or None to render such a conversation as it is (a Jinja template may
            then write a system prompt of its own).
        preflight: called first by :meth:`load`, on the engine thread; raises an
            :class:`EngineError` to refuse the load (the build does not fit this CPU:
            :func:`tui_chat.engines.make_engine`).
        template_kwargs: more variables for the model's Jinja template, as
            transformers' ``apply_chat_template`` keyword arguments
            (``{"enable_thinking": False}``); None passes none.
    """

    answers_now = True
    """It ends the thinking itself on "answer now" (:meth:`CancelToken.answer_now`)."""

    def __init__(
        self,
        model: ModelHeader | str | Path,
        *,
        n_ctx: int = 4096,
        n_ctx_chosen: bool = True,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        n_batch: int = 256,
        chat_format: str | None = None,
        log_path: Path | None = None,
        default_system_prompt: str | None = None,
        preflight: Callable[[], None] | None = None,
        template_kwargs: Mapping[str, object] | None = None,
    ) -> None:
        self._header = model if isinstance(model, ModelHeader) else None
        self.model_path = model.path if isinstance(model, ModelHeader) else Path(model)
        self.n_ctx = n_ctx
        self.n_ctx_chosen = n_ctx_chosen
        self.n_gpu_layers = n_gpu_layers
        self.n_threads = n_threads
        self.n_batch = n_batch
        self.chat_format = chat_format
        self.log_path = log_path
        self.default_system_prompt = default_system_prompt
        self._preflight = preflight
        self.template_kwargs = dict(template_kwargs or {})
        self._llm: Any = None
        self._template: ChatTemplate | None = None
        # Control tokens that open a new turn: a reply ends at them (engine/turns.py).
        self._turn_openers: frozenset[int] = frozenset()
        # Control tokens that spell a thinking tag -> their text (gpt-oss, Gemma 4).
        self._tag_tokens: dict[int, bytes] = {}
        # Notices for the next PrefillDone, and whether the template's fallback was
        # announced (once per load).
        self._notices: list[str] = []
        self._fell_back = False
        self._info: ModelInfo | None = None
        self._busy = threading.Lock()
        # Held while another thread tokenizes (count_tokens) and while close() frees
        # the model, so a count never reads a freed vocabulary.
        self._freeing = threading.Lock()
        # The parts and tokens fed for the last turn (prompt + reply), with message
        # boundaries.
        self._splice = Splice()
        self._prompt_vocab: LlamaVocab | None = None
        self.last_prompt_tokens: list[int] = []
        self._bos: int | None = None
        self._piece_buf = (ctypes.c_char * 256)()

    @property
    def info(self) -> ModelInfo | None:
        return self._info

    @property
    def vocab(self) -> LlamaVocab | None:
        """The loaded model's vocabulary (tokenize, special tokens), None before load."""
        return self._prompt_vocab

    @property
    def stop_strings(self) -> Sequence[str]:
        return self._template.stop_strings if self._template else ()

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        """Load the GGUF (seconds; a minute for a 40 GB model offloaded to a GPU).

        Args:
            on_progress: llama.cpp's model load progress (see
                :func:`load_progress`), called on this thread with the fraction of
                the tensor data loaded (0.0-1.0; a few hundred calls, one per tensor,
                then 1.0). Return False to stop the load: llama.cpp stops at the next
                tensor and frees what it allocated. Building the context (the KV
                cache) after the last call is not covered.

        Returns:
            The loaded model's :class:`ModelInfo`; its ``notices`` hold one-line
            warnings for the user (GPU offload asked of a build without it, a chat
            template that could not be used).

        Raises:
            LoadCancelled: ``on_progress`` returned False.
            ModelFileError: the file is not a usable GGUF (see
                :func:`~tui_chat.engine.modelfile.check_model_file`) or llama.cpp
                could not load it; the message says why.
            EngineError: a ``--chat-format`` that does not fit the model.
        """
        if self._preflight is not None:
            self._preflight()
        header = self._header or read_model_header(self.model_path)
        try:
            str(header.path).encode("utf-8")
        except UnicodeEncodeError:
            # llama-cpp-python passes the path to llama.cpp as UTF-8; a name in another
            # encoding (a lone surrogate in Python) would fail there as an encode error.
            shown = os.fsencode(header.path).decode("utf-8", "backslashreplace")
            raise ModelFileError(
                f"{shown}: the file name is not UTF-8, and llama.cpp opens only UTF-8 "
                "names; rename the file or link it under a UTF-8 name"
            ) from None
        memory = total_memory_bytes()
        if self.n_gpu_layers == 0 and memory and header.size_bytes > memory:
            # The weights may not fit (a file is never smaller than its weights): only
            # the tensor table says. Otherwise it is read only if llama.cpp fails (a
            # file cut short), to say why: walking a 262k-token vocabulary costs 130 ms.
            check_fits_in_memory(check_model_file(self.model_path), memory)
        from tui_chat.engine import native_log

        notices: list[str] = []
        try:
            native_log.install(self.log_path)
        except OSError as exc:
            native_log.install(None)
            notices.append(
                f"llama.cpp's log cannot be written to {self.log_path}: "
                f"{exc.strerror or exc}; it is kept in memory only"
            )
        import jinja2
        import llama_cpp

        # The default window is lowered to what the model was trained for; a chosen
        # one beyond it is kept, and said (issue 19).
        trained = read_trained_context(header.path, header.architecture)
        n_ctx, context_note = fit_context(self.n_ctx, self.n_ctx_chosen, trained)
        if context_note is not None:
            notices.append(context_note)
        n_before = len(native_log.recent_lines(200))
        hook: _ProgressHook | None = None
        try:
            with load_progress(on_progress) as hook:
                llm = llama_cpp.Llama(
                    model_path=str(header.path),
                    n_ctx=n_ctx,
                    n_gpu_layers=self.n_gpu_layers,
                    n_threads=self.n_threads,
                    n_batch=self.n_batch,
                    flash_attn=FLASH_ATTENTION,
                    verbose=False,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            if hook is not None and hook.stopped:
                hook.raise_interrupt()
                raise LoadCancelled(f"the load of {self.model_path.name} was stopped") from exc
            check_model_file(self.model_path)  # a file cut short, in our words
            raise ModelFileError(self._load_failure(str(exc), n_before)) from exc
        except jinja2.TemplateError as exc:
            # llama-cpp-python compiles every chat template of the GGUF while loading,
            # and lets a syntax error escape from its constructor.
            raise ModelFileError(
                f"{self.model_path}: its chat template (tokenizer.chat_template) is not "
                f"valid Jinja ({str(exc)[:120]!r}), and llama-cpp-python will not load "
                "a file with a broken template"
            ) from exc
        if hook is not None:
            # llama.cpp calls it only while loading; the params outlive the load.
            llm.model_params.progress_callback = llama_cpp.llama_progress_callback()
            if hook.stopped:  # stopped at the last report: the load is not wanted
                llm.close()
                hook.raise_interrupt()
                raise LoadCancelled(f"the load of {self.model_path.name} was stopped")
        sampling.install(llm)  # the same draws, 230 µs a token sooner
        self._llm = llm
        self.n_ctx = llm.n_ctx()
        vocab = llm._model.vocab
        self._vocab = vocab
        self._is_eog = llama_cpp.llama_vocab_is_eog
        self._token_to_piece = llama_cpp.llama_token_to_piece
        self._prompt_vocab = LlamaVocab(llm, self._piece)
        add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self._bos = llm.token_bos() if add_bos and llm.token_bos() >= 0 else None
        bos_text, eos_text = (
            self._piece(t, special=True).decode("utf-8", "replace") if t >= 0 else ""
            for t in (llm.token_bos(), llm.token_eos())
        )
        metadata = checked_metadata(llm.metadata)
        metadata["general.architecture"] = header.architecture
        try:
            self._template, note = choose_template(
                metadata,
                self.chat_format,
                bos_text,
                eos_text,
                strip_bos=self._bos is not None,
                variables=self.template_kwargs,
            )
        except ValueError as exc:
            raise EngineError(str(exc)) from exc
        self._notices, self._fell_back = [], False
        if note:
            notices.append(note)
        vocab_of = self._prompt_vocab
        self._tag_tokens = _tag_tokens(self._template, vocab_of)
        self._turn_openers = turn_openers(
            self._template,
            lambda text: vocab_of.tokenize(text, special=True),
            vocab_of.is_control,
            lambda token: bool(self._is_eog(vocab, token)),
        )
        n_layers = int(llama_cpp.llama_model_n_layer(llm.model))
        offloaded = 0
        if self.n_gpu_layers:
            if llama_cpp.llama_supports_gpu_offload():
                offloaded = n_layers if self.n_gpu_layers < 0 else min(self.n_gpu_layers, n_layers)
            else:
                notices.append(no_gpu_offload_notice(self.n_gpu_layers))
        self._info = ModelInfo(
            name=self.model_path.name.removesuffix(".gguf"),
            n_ctx=llm.n_ctx(),
            chat_format=self._template.name,
            architecture=header.architecture,
            n_gpu_layers=offloaded,
            n_layers=n_layers,
            notices=tuple(notices),
            thinking_switches=tuple(
                {"enable_thinking": "thinking", "reasoning_effort": "reasoning_effort"}[v]
                for v in sorted(self._template.switches)
            ),
        )
        return self._info

    def _load_failure(self, error: str, n_before: int) -> str:
        """One line saying why the native load failed, from llama.cpp's log lines.

        llama-cpp-python raises only "Failed to load model from file"; the reason is
        in the log (llama.cpp as bundled with llama-cpp-python 0.3.36): "unknown model
        architecture: 'X'", "failed to allocate ...", "tensor 'X' data is not within
        the file bounds, model is corrupted or incomplete", or else "error loading
        model: ..." (whose detail we show rather than the generic "failed to load
        model" line that follows it).
        """
        from tui_chat.engine import native_log

        lines = native_log.recent_lines(200)[n_before:] or native_log.recent_lines(20)
        for line in reversed(lines):
            low = line.lower()
            if "not within the file bounds" in low:
                return (
                    f"{self.model_path} is incomplete or corrupted ({line.strip()}); the "
                    "download was probably cut short, download it again"
                )
            if "unknown model architecture" in low:
                arch = line.split("unknown model architecture:", 1)[-1].strip(" :'\"")
                return (
                    f"{self.model_path}: llama.cpp does not know the model architecture "
                    f"'{arch}'; a newer llama-cpp-python may support it"
                )
            if "failed to allocate" in low or "unable to allocate" in low or "out of memory" in low:
                return (
                    f"{self.model_path}: not enough memory to load the model "
                    f"({line.strip()}); try a smaller quantisation, a smaller --n-ctx or "
                    "fewer --n-gpu-layers"
                )
        detail = next(
            (
                ln.split("error loading model:", 1)[1].strip()
                for ln in reversed(lines)
                if "error loading model:" in ln
            ),
            None,
        ) or next(
            (ln.strip() for ln in reversed(lines) if "error" in ln.lower() or "fail" in ln.lower()),
            error,
        )
        return f"{self.model_path}: llama.cpp could not load the model: {detail}"

    def _piece(self, token: int, special: bool = False) -> bytes:
        """Raw bytes of one token (llama_token_to_piece), never NUL-padded."""
        buf = self._piece_buf
        n = self._token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            big = (ctypes.c_char * -n)()
            n = self._token_to_piece(self._vocab, token, big, -n, 0, special)
            return big.raw[:n]
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of token ids, special tokens spelled out (invalid UTF-8 replaced)."""
        data: bytes = self._llm.detokenize(list(tokens), special=True)
        return data.decode("utf-8", "replace")

    @property
    def llm(self) -> Any:
        """The ``llama_cpp.Llama`` object (None before :meth:`load`), for tests and
        tools that inspect the vocabulary. Engine thread only."""
        return self._llm

    def piece(self, token: int, special: bool = False) -> bytes:
        """Raw bytes of one token (llama.cpp's token-to-piece); ``special`` spells out
        control tokens."""
        return self._piece(token, special)

    @property
    def bos_token_id(self) -> int | None:
        """The BOS token id the model wants at the start of a prompt, or None."""
        return self._bos

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` as the model reads it (plain text, no special tokens), or
        None before :meth:`load` and after :meth:`close`. Any thread: llama.cpp's
        tokenizer only reads the vocabulary, so the composer's size hint may count
        while a reply decodes; :meth:`close` waits for a count in progress before it
        frees the model."""
        with self._freeing:
            vocab = self._prompt_vocab if self._llm is not None else None
            return None if vocab is None else len(vocab.tokenize(text, False))

    @property
    def n_cached_tokens(self) -> int:
        """Tokens in the KV cache (prompt and reply tokens evaluated so far)."""
        return int(self._llm.n_tokens) if self._llm is not None else 0

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> tuple[Prompt, list[int]]:
        """Render and tokenise a conversation.

        When the last message is an assistant message, the prompt ends inside it (a
        reply that is continued). Message content is plain text: special tokens come
        only from the template's glue, and the prompt starts with exactly one BOS token
        when the model wants one (none for a model that adds no BOS).

        Returns:
            The rendered prompt parts and their tokens.

        Raises:
            EngineError: the chat template refused the conversation (a Jinja
                template's ``raise_exception``, or an error inside the template) and
                there is no built-in format to fall back to (``--chat-format
                jinja``... see :meth:`render`).
        """
        parts, tokens, _ = self._prompt(messages)
        return parts, tokens

    def render(self, messages: Sequence[ChatMessage]) -> Prompt:
        """The prompt parts of a conversation, as :meth:`prompt_tokens` renders them
        (the default system prompt added when it has none).

        A conversation the model's Jinja template cannot render (one it was not tried
        on at load: two user messages in a row for a template that demands
        alternation...) is written in the built-in format the template resembles; the
        first time, a notice says so (it goes out with the next
        :class:`~tui_chat.engine.base.PrefillDone`), never one per message.

        Raises:
            EngineError: the chat template refused the conversation and has no
                built-in format to fall back to.
        """
        assert self._template is not None
        if self.default_system_prompt is not None and all(m["role"] != "system" for m in messages):
            messages = [{"role": "system", "content": self.default_system_prompt}, *messages]
        try:
            return _render(self._template, messages)
        except RenderError as exc:
            fallback = self._template.fallback
            if fallback is None:
                # The message may come from the GGUF (a template's raise_exception): quoted.
                raise EngineError(
                    f"the chat template failed on this conversation: {str(exc)[:200]!r}"
                ) from exc
            if not self._fell_back:
                self._fell_back = True
                self._notices.append(
                    f"the model's chat template cannot render this conversation "
                    f"({str(exc)[:200]!r}); it is written in the built-in {fallback.name} "
                    "format, and so is any other it cannot render (said once)"
                )
            return _render(fallback, messages)

    def _prompt(self, messages: Sequence[ChatMessage]) -> tuple[Prompt, list[int], Mark]:
        """(parts, tokens, the splice mark reused) for a conversation."""
        assert self._prompt_vocab is not None
        parts = self.render(messages)
        mark, rest = self._splice.match(parts)
        if mark[1]:
            tokens = self._splice.tokens[: mark[1]] + tokenize_parts(rest, self._prompt_vocab)
        else:
            bos = [self._bos] if self._bos is not None else []
            tokens = bos + tokenize_parts(parts, self._prompt_vocab)
        return parts, tokens, mark

    def _fit(
        self, messages: Sequence[ChatMessage], max_tokens: int
    ) -> tuple[Prompt, list[int], Mark, int]:
        """Drop the oldest turns until the prompt fits; returns the messages dropped.

        A user message leaves with the assistant's reply to it, so the history keeps
        the user/assistant alternation many templates demand (Mistral's and Gemma's
        raise otherwise); system messages stay.
        """
        reserve = min(max_tokens, self.n_ctx // 4)
        msgs = list(messages)
        dropped = 0
        # The newest message is kept, and with a reply that is continued its question.
        keep = 2 if msgs and msgs[-1]["role"] == "assistant" else 1
        while True:
            parts, tokens, mark = self._prompt(msgs)
            if len(tokens) + reserve <= self.n_ctx:
                return parts, tokens, mark, dropped
            droppable = len(msgs) - keep
            idx = next((i for i in range(droppable) if msgs[i]["role"] != "system"), None)
            if idx is None:
                raise ContextOverflowError(len(tokens), self.n_ctx, reserve)
            pair = (
                idx + 1 < droppable
                and msgs[idx]["role"] == "user"
                and msgs[idx + 1]["role"] == "assistant"
            )
            n = 2 if pair else 1
            del msgs[idx : idx + n]
            dropped += n

    def _take_notices(self) -> tuple[str, ...]:
        notices, self._notices = tuple(self._notices), []
        return notices

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        """See :meth:`tui_chat.engine.base.Engine.generate`."""
        if self._llm is None:
            raise EngineError("no model loaded")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("LlamaEngine entered by two threads at once")
        try:
            yield from self._generate(messages, params, cancel)
        finally:
            self._busy.release()

    def _generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        llm = self._llm
        t0 = time.perf_counter()
        self._switch_thinking(params)
        parts, tokens, mark, dropped = self._fit(messages, params.max_tokens)
        # The KV cache holds llm.input_ids[:llm.n_tokens]. Reuse its longest common
        # prefix with the new prompt, keeping at least one token to evaluate so the
        # logits for the first sample are fresh.
        cached = llm.input_ids[: llm.n_tokens].tolist()
        lcp = 0
        for a, b in zip(cached, tokens[:-1], strict=False):
            if a != b:
                break
            lcp += 1
        if lcp < llm.n_tokens and not llm._ctx.kv_cache_seq_rm(-1, lcp, -1):
            lcp = 0
            llm.reset()
        llm.n_tokens = lcp
        self._splice.begin_turn(parts, tokens, mark)
        body = tokens[lcp:-1]
        # Progress only for a prefill of more than one batch (the last prompt token is
        # evaluated with the first decode step, hence the + 1).
        report = len(body) + 1 > self.n_batch
        n_total = len(tokens) - lcp
        t_body = time.perf_counter()
        for i in range(0, len(body), self.n_batch):
            if report:
                elapsed_ms = (time.perf_counter() - t_body) * 1000
                yield PrefillProgress(i, n_total, elapsed_ms, n_reused=lcp)
            if cancel.is_set():
                return
            llm.eval(body[i : i + self.n_batch])
        if report:
            elapsed_ms = (time.perf_counter() - t_body) * 1000
            yield PrefillProgress(len(body), n_total, elapsed_ms, n_reused=lcp)
        if cancel.is_set():
            return
        import llama_cpp

        llm.set_seed(params.seed if params.seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED)
        fmt = self._template.thinking if self._template is not None else None
        tail = "".join(p.text for p in parts[-4:])
        inside = fmt is not None and (
            starts_inside(tail, fmt) or (bool(messages) and _carries_thinking(messages[-1]))
        )
        budget = _Budget(fmt, inside, params.reasoning_budget, cancel)
        vocab = self._prompt_vocab
        gen = llm.generate(tokens, **self._sampling_options(params))
        reply: list[int] = []
        first = True
        first_piece = True  # a stop during the prefill still shows the first token
        step_start = time.perf_counter()
        try:
            token = next(gen, None)
            while token is not None:
                now = time.perf_counter()
                if first:
                    first = False
                    yield PrefillDone(
                        n_prompt_tokens=len(tokens),
                        n_evaluated=len(tokens) - lcp,
                        prefill_ms=(now - t0) * 1000,
                        trimmed_messages=dropped,
                        notices=self._take_notices(),
                        thinking=fmt,
                        thinking_open=inside,
                    )
                step_ms = (now - step_start) * 1000
                if cancel.is_set() and not first_piece:
                    # Sampled after the stop was asked for, and never evaluated: not
                    # shown, so the KV cache holds every token of the reply that is
                    # kept and the next prompt (a steer: issue 20) evaluates nothing
                    # of it again.
                    break
                first_piece = False
                if self._is_eog(self._vocab, token):
                    yield TokenPiece(b"", eog=True, step_ms=step_ms)
                    break
                if token in self._turn_openers:
                    # The model opens a new turn (a made-up user message) with a token
                    # that decodes to no text: the reply ends here (issue 19).
                    spelled = self._piece(token, special=True).decode("utf-8", "replace")
                    yield TokenPiece(b"", eog=True, step_ms=step_ms, control=spelled)
                    break
                reply.append(token)
                # A thinking tag that is a control token reaches the splitter as text.
                piece = self._tag_tokens.get(token) or self._piece(token)
                # Keep the splice state current at every step: the consumer may stop
                # iterating after any token (cancel, stop string, max tokens).
                yield TokenPiece(piece, step_ms=step_ms)
                if cancel.is_set() or len(reply) >= params.max_tokens:
                    break
                if len(tokens) + len(reply) >= self.n_ctx:
                    break
                wrap_up = budget.step(piece)
                if wrap_up and vocab is not None:
                    # Close the thinking on the same KV cache: evaluate the last token
                    # with the wrap-up and the end-of-thinking tag, then sample on from
                    # there (the new generator finds it all cached: no second prefill).
                    extra = vocab.tokenize(wrap_up, special=True)
                    extra = extra[: max(0, self.n_ctx - len(tokens) - len(reply) - 1)]
                    for t in extra:
                        yield TokenPiece(self._tag_tokens.get(t) or self._piece(t), injected=True)
                    gen.close()
                    step_start = time.perf_counter()
                    llm.eval([token, *extra])
                    reply += extra
                    gen = llm.generate(tokens + reply, **self._sampling_options(params))
                    token = next(gen, None)
                    continue
                step_start = time.perf_counter()
                token = next(gen, None)
        finally:
            gen.close()
            reply_bytes = b"".join(self._piece(t) for t in reply)
            try:
                reply_text = reply_bytes.decode("utf-8")
            except UnicodeDecodeError:
                reply_text = ""
            tokens_of = self._prompt_vocab
            # A reply that holds a control token is not spliced into the next prompt:
            # there it is plain text like every other message. Nor is one that is not
            # valid UTF-8 (its text is not what the tokens say).
            if (
                reply_text
                and tokens_of
                and not budget.seen
                and not any(tokens_of.is_control(t) for t in reply)
            ):
                # A reply with thinking is not spliced either: the next prompt holds
                # its answer alone (templates drop earlier thinking), so the KV cache
                # is reused up to the reply's first token and no further.
                self._splice.end_turn(reply_text, reply)
                if cancel.is_set() and llm.n_tokens == len(tokens) + len(reply) - 1:
                    # Stopped after its last token was shown (the stop came while the
                    # consumer took it): evaluate it now, so the KV cache holds the
                    # whole partial reply the next prompt starts with.
                    llm.eval(reply[-1:])
            self.last_prompt_tokens = tokens

    def _switch_thinking(self, params: SamplingParams) -> None:
        """Pass the conversation's thinking switches to the template for this reply's
        renders (only those it reads; the rest is left to the template's defaults)."""
        template = self._template
        if template is None:
            return
        overrides: dict[str, object] = {}
        if params.thinking in ("on", "off") and "enable_thinking" in template.switches:
            overrides["enable_thinking"] = params.thinking == "on"
        if params.reasoning_effort != "default" and "reasoning_effort" in template.switches:
            overrides["reasoning_effort"] = params.reasoning_effort
        if template.overrides != overrides:
            template.overrides.clear()
            template.overrides.update(overrides)

    def _sampling_options(self, params: SamplingParams) -> dict[str, Any]:
        """Keyword arguments of ``Llama.generate`` for ``params`` (tests add a
        ``logits_processor`` here to force a token)."""
        return {
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "temp": params.temperature,
            "repeat_penalty": params.repeat_penalty,
        }

    # KV state for snapshots (issue 13): the native half. The snapshot files, their
    # header and every check on them are tui_chat.history.kvcache's; these methods only
    # see the one path they are given. Engine thread only, like generate().

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[Any]:
        if self._llm is None:
            raise EngineError("no model loaded")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("LlamaEngine entered by two threads at once")
        try:
            yield self._llm
        finally:
            self._busy.release()

    def kv_fingerprint(self) -> dict[str, str | int | bool]:
        """Everything the KV cache's content depends on besides the model file's
        content: the chat template (a digest of how it renders a probe chat), ``n_ctx``,
        the KV cache settings (types, flash attention, full SWA cache, sequences, RoPE
        scaling) and the llama-cpp-python version.

        A snapshot's fingerprint is these fields with the model file's SHA-256, which
        :mod:`tui_chat.history.kvcache` computes once per file, as hashing a large model
        takes seconds. Floats are stored as ``float.hex()`` strings so that they compare
        exactly.

        Raises:
            EngineError: no model loaded.
            RuntimeError: called while another thread is inside the engine.
        """
        import llama_cpp

        with self._exclusive() as llm:
            cp = llm.context_params
            fp: dict[str, str | int | bool] = {
                "template": self._template_digest(),
                "n_ctx": int(llm.n_ctx()),
                "llama_cpp_python": str(llama_cpp.__version__),
            }
            for name in ("type_k", "type_v", "flash_attn_type", "n_seq_max", "rope_scaling_type"):
                fp[name] = int(getattr(cp, name))
            for name in ("swa_full", "kv_unified", "embeddings"):
                fp[name] = bool(getattr(cp, name))
            for name in (
                "rope_freq_base",
                "rope_freq_scale",
                "yarn_ext_factor",
                "yarn_attn_factor",
                "yarn_beta_fast",
                "yarn_beta_slow",
            ):
                fp[name] = float(getattr(cp, name)).hex()
            fp["yarn_orig_ctx"] = int(cp.yarn_orig_ctx)
            return fp

    def _template_digest(self) -> str:
        """A SHA-256 of how the chat template renders a probe chat, its stop strings
        and the BOS token id.

        Rendering (not only the name) catches a template whose text changed between
        tui-chat versions or a GGUF whose Jinja template changed.
        """
        template = self._template
        assert template is not None
        probe: list[ChatMessage] = [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ]
        try:
            rendered = "".join(
                f"{int(p.glue)}{len(p.text)}:{p.text}" for p in template.render(probe)
            )
        except Exception as exc:  # a Jinja template may refuse any input
            rendered = f"render failed: {type(exc).__name__}"
        import hashlib  # OpenSSL's: 3 ms, not before the first frame (issue 16)

        h = hashlib.sha256()
        for part in (template.name, rendered, "\x00".join(template.stop_strings), str(self._bos)):
            h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
        return h.hexdigest()

    def kv_state_size_bytes(self) -> int:
        """About how large a state file of the current KV cache would be, in bytes
        (``llama_state_get_size``: a dry run, no copy). 0 when nothing is loaded."""
        import llama_cpp

        if self._llm is None:
            return 0
        return int(llama_cpp.llama_state_get_size(self._llm._ctx.ctx))

    def save_kv_state(self, path: Path) -> tuple[int, Splice]:
        """Write the context state to ``path`` with llama.cpp's ``llama_state_save_file``
        (from llama.cpp to the file without passing through Python; the layout is in
        :mod:`tui_chat.history.kvcache`).

        Returns:
            How many tokens the KV cache holds, and the splice aligned with them: its
            tokens start with them and may hold one more (the last sampled token of a
            reply cut at ``max_tokens`` is never evaluated). ``(0, Splice())``, and no
            file, when the KV cache is empty.

        Raises:
            EngineError: no model loaded, or llama.cpp could not write the file (a
                partial file may be left at ``path``).
            RuntimeError: called while another thread is inside the engine.
        """
        import llama_cpp

        with self._exclusive() as llm:
            n = int(llm.n_tokens)
            if n == 0:
                return 0, Splice()
            kv = [int(t) for t in llm.input_ids[:n]]
            arr = (llama_cpp.llama_token * n)(*kv)
            if not llama_cpp.llama_state_save_file(llm._ctx.ctx, os.fsencode(path), arr, n):
                raise EngineError("llama.cpp could not write the state file")
            return n, self._splice.aligned_with(kv)

    def check_kv_state(
        self, splice: Splice, n_kv_tokens: int, messages: Sequence[ChatMessage] | None = None
    ) -> int:
        """Check, before any state is read, that a saved KV state fits this model and,
        when ``messages`` is given, holds a prefix of that conversation.

        Args:
            splice: the prompt parts and tokens the state was fed.
            n_kv_tokens: how many of ``splice.tokens`` (the first) the state holds.
            messages: the conversation about to continue (without the new message), or
                None to skip the prefix check. A regenerate or edit may pass the
                conversation up to the turn it replaces.

        Returns:
            How many prompt tokens of ``messages`` the state holds (by the splice's
            longest matching mark); ``n_kv_tokens`` without ``messages``.

        Raises:
            EngineError: no model loaded; more tokens than the context window, a token
                this model does not have, or a start unlike this model's prompts (BOS);
                no prefix of ``messages`` beyond BOS ("another conversation"); or the
                chat template refused ``messages``.
            RuntimeError: called while another thread is inside the engine.
        """
        with self._exclusive() as llm:
            self._check_kv_tokens(llm, splice, n_kv_tokens)
            if messages is None:
                return n_kv_tokens
            n_reusable = splice.reusable(self.render(messages), n_kv_tokens)
            if n_reusable <= (1 if self._bos is not None else 0):
                raise EngineError("snapshot is of another conversation")
            return n_reusable

    def _check_kv_tokens(self, llm: Any, splice: Splice, n_kv_tokens: int) -> None:
        """Refuse a KV state this model cannot take (see :meth:`check_kv_state`)."""
        if n_kv_tokens > int(llm.n_ctx()):
            raise EngineError("snapshot holds more tokens than the context window")
        n_vocab = int(llm.n_vocab())
        if any(t >= n_vocab for t in splice.tokens):
            raise EngineError("snapshot holds tokens this model does not have")
        if (self._bos is not None) != (splice.tokens[:1] == [self._bos]):
            raise EngineError("snapshot does not start as this model's prompts do")

    def load_kv_state(self, path: Path, splice: Splice, n_kv_tokens: int) -> None:
        """Replace the whole KV cache with a state file written by
        :meth:`save_kv_state` (``llama_state_load_file``), and set the engine's view of
        it (llama-cpp-python's ``input_ids``/``n_tokens``, the splice) to match, so the
        next :meth:`generate` evaluates only tokens after the restored prefix.

        llama.cpp trusts what it reads: check the file first
        (:func:`tui_chat.history.kvcache.check_state_file`). The tokens are checked
        again here as in :meth:`check_kv_state`.

        Args:
            path: the state file.
            splice: the prompt parts and tokens the state was fed.
            n_kv_tokens: how many of ``splice.tokens`` (the first) the state holds.

        Raises:
            EngineError: no model loaded or the tokens do not fit (the KV cache is
                unchanged), or llama.cpp could not read the file or found other tokens
                in it (the KV cache is cleared).
            RuntimeError: called while another thread is inside the engine.
        """
        import llama_cpp

        with self._exclusive() as llm:
            self._check_kv_tokens(llm, splice, n_kv_tokens)
            n_ctx = int(llm.n_ctx())
            out = (llama_cpp.llama_token * n_ctx)()
            count = ctypes.c_size_t(0)
            ok = llama_cpp.llama_state_load_file(
                llm._ctx.ctx, os.fsencode(path), out, n_ctx, ctypes.byref(count)
            )
            restored = list(out[: count.value])
            if not ok or restored != splice.tokens[:n_kv_tokens]:
                self._forget_kv()
                raise EngineError("llama.cpp could not read the snapshot state file")
            llm.input_ids[:n_kv_tokens] = restored
            llm.n_tokens = n_kv_tokens
            # Logits were restored too, but the next generate() evaluates at least one
            # token anyway; this tells llama-cpp-python not to sample from them.
            llm._requires_eval = True
            self._splice = Splice(splice.parts, list(splice.tokens), list(splice.marks))

    def _forget_kv(self) -> None:
        """Empty the KV cache and the engine's view of it (after a failed restore)."""
        import llama_cpp

        llm = self._llm
        mem = llama_cpp.llama_get_memory(llm._ctx.ctx)
        if mem is not None:
            llama_cpp.llama_memory_clear(mem, True)
        llm.n_tokens = 0
        llm._requires_eval = True
        self._splice = Splice()

    def close(self) -> None:
        """Free the model (native memory). Safe to call twice."""
        self._splice = Splice()
        with self._freeing:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()


def _tag_tokens(template: ChatTemplate, vocab: LlamaVocab) -> dict[int, bytes]:
    """Control tokens that spell one of the template's thinking tags, with the tag's
    text: a control token decodes to no text, and the splitter must see the tag."""
    fmt = template.thinking
    out: dict[int, bytes] = {}
    if fmt is None:
        return out
    for spelling in fmt.spellings:
        ids = vocab.tokenize(spelling, special=True)
        if len(ids) == 1 and vocab.is_control(ids[0]):
            out[ids[0]] = spelling.encode("utf-8")
    return out


class _Budget:
    """The engine's own watch on the thinking, for its budget and "answer now".

    It splits the decoded reply with the same :class:`ThinkingSplitter` as the
    streaming core (the engine must know when thinking ends to count it), and says
    when to close it: after ``budget`` thinking tokens, or at the user's "answer now".

    Args:
        fmt: the template's thinking tags, or None (then it never acts).
        inside: the prompt opened the thinking.
        budget: most thinking tokens; -1 for no limit.
        cancel: the reply's token (its ``answer_requested``).
    """

    def __init__(
        self, fmt: ThinkingFormat | None, inside: bool, budget: int, cancel: CancelToken
    ) -> None:
        self._fmt = fmt
        self._splitter = ThinkingSplitter(fmt, inside)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._budget = budget
        self._cancel = cancel
        self._n = 0
        self._done = fmt is None
        self.seen = inside
        """True once the reply had thinking (it is then not spliced)."""

    def step(self, piece: bytes) -> str | None:
        """Take one sampled token's bytes; the text to append now, or None."""
        if self._done:
            return None
        assert self._fmt is not None
        self._splitter.feed(self._decoder.decode(piece))
        if not self._splitter.thinking:
            if self.seen:
                self._done = True  # the model closed it itself
            return None
        self.seen = True
        self._n += 1
        if (0 <= self._budget <= self._n) or self._cancel.answer_requested:
            self._done = True
            return WRAP_UP + self._fmt.close + "\n\n"
        return None


def _render(template: ChatTemplate, messages: Sequence[ChatMessage]) -> Prompt:
    """``messages`` as ``template`` writes them.

    When the last message is the assistant's, the prompt ends inside it, with its
    text so far and no end-of-turn glue, so the model carries on the same message. It
    is the prompt of the conversation before that reply (which ends with the
    assistant's turn header) plus the reply's text: the splice of that reply, so the
    KV cache is reused to its last token.

    Raises:
        RenderError: the template cannot render this conversation.
    """
    if messages and messages[-1]["role"] == "assistant":
        head = template.render(messages[:-1])
        last = messages[-1]
        fmt = template.thinking
        if fmt is not None and _carries_thinking(last):
            # A reply cut while thinking goes on inside its thinking (issue 18).
            opened = starts_inside("".join(p.text for p in head[-4:]), fmt)
            tag = () if opened else (glue(fmt.open + "\n"),)
            return normalize((*head, *tag, content(last.get("reasoning", ""))))
        return normalize((*head, content(last["content"])))
    return normalize(template.render(messages))


def _carries_thinking(message: ChatMessage) -> bool:
    """True for an assistant message carried on inside its thinking (it has thinking
    and no answer yet)."""
    return bool(message.get("reasoning")) and not message["content"].strip()


class _ProgressHook:
    """One load's progress callback, as the ctypes function llama.cpp calls.

    llama.cpp calls it from inside ``llama_model_load_from_file``: an exception must
    not leave it (ctypes would print it on stderr, over the UI, and return 0, which
    aborts the load). A callback that raises is not called again and the load goes
    on; a ``KeyboardInterrupt`` stops the load and is raised again once the native
    call has returned (:meth:`raise_interrupt`).

    Args:
        on_progress: the caller's callback (see :meth:`LlamaEngine.load`).
        c_type: ``llama_cpp.llama_progress_callback``, the ctypes function type.
    """

    def __init__(self, on_progress: LoadProgressFn, c_type: Any) -> None:
        self._on_progress = on_progress
        self._broken = False
        self.stopped = False
        """True once the callback returned False (or was interrupted)."""
        self.interrupt: BaseException | None = None
        self.c_callback = c_type(self._call)
        """The ctypes function; it must stay alive as long as llama.cpp may call it."""

    def _call(self, progress: float, _user_data: Any) -> bool:
        if self.stopped:
            return False
        if self._broken:
            return True
        try:
            keep = bool(self._on_progress(min(max(float(progress), 0.0), 1.0)))
        except Exception:
            self._broken = True  # a bug in a progress display must not fail the load
            return True
        except BaseException as exc:  # KeyboardInterrupt, SystemExit on the main thread
            self.interrupt, keep = exc, False
        self.stopped = self.stopped or not keep
        return keep

    def raise_interrupt(self) -> None:
        """Raise the KeyboardInterrupt (or SystemExit) the callback caught, if any."""
        if self.interrupt is not None:
            raise self.interrupt


# Loads with a progress callback in progress: thread id -> its ctypes callback.
_progress_hooks: dict[int, Any] = {}
_progress_lock = threading.Lock()
_default_params: list[Any] = []  # llama.cpp's own llama_model_default_params, while replaced


@contextlib.contextmanager
def load_progress(on_progress: LoadProgressFn | None) -> Iterator[_ProgressHook | None]:
    """Give the ``llama_cpp.Llama(...)`` built inside this block ``on_progress`` as
    llama.cpp's model load ``progress_callback``.

    llama-cpp-python 0.3.36's ``Llama.__init__`` takes no such argument: it builds its
    model params with ``llama_model_default_params()`` from the ``llama_cpp.llama_cpp``
    module (``llama.py``, "Model Params"). For the duration of the block that module
    function is replaced by one that sets the callback, for loads on this thread only
    (another thread's load gets llama.cpp's defaults); the original is put back when
    the last such block ends, whatever happens inside.

    Yields:
        The hook (``stopped``: the callback returned False), or None when
        ``on_progress`` is None (nothing is replaced).
    """
    if on_progress is None:
        yield None
        return
    import llama_cpp.llama_cpp as native

    hook = _ProgressHook(on_progress, native.llama_progress_callback)
    thread = threading.get_ident()
    with _progress_lock:
        if not _progress_hooks:
            original = native.llama_model_default_params
            _default_params[:] = [original]

            def default_params() -> Any:
                params = original()
                callback = _progress_hooks.get(threading.get_ident())
                if callback is not None:
                    params.progress_callback = callback
                return params

            native.llama_model_default_params = default_params
        _progress_hooks[thread] = hook.c_callback
    try:
        yield hook
    finally:
        with _progress_lock:
            _progress_hooks.pop(thread, None)
            if not _progress_hooks and _default_params:
                native.llama_model_default_params = _default_params.pop()


def no_gpu_offload_notice(n_gpu_layers: int) -> str:
    """The warning for ``--n-gpu-layers`` on a llama-cpp-python build without GPU
    offload (``llama_supports_gpu_offload()`` is false): replay case C39, where such a
    run went on on the CPU without a word."""
    return (
        f"--n-gpu-layers {n_gpu_layers} asks for GPU offload, but this llama-cpp-python "
        "build has none (a CPU build, or no GPU found): the model runs on the CPU. "
        "For a CUDA build: make run CUDA=1 (needs the CUDA toolkit)"
    )
