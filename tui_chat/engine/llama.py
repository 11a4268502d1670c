"""The embedded llama.cpp engine (llama-cpp-python): load, template, prefill, decode, cancel.

One :class:`LlamaEngine` owns one ``llama_cpp.Llama``; only the engine thread calls it,
and a lock makes a second caller fail loudly instead of corrupting the KV cache.

Prefill is fed in ``n_batch`` chunks with a cancel check between chunks, so Esc during
a long prompt is honoured within one prompt batch (replay case C08). Decode checks
the cancel flag once per step.

Special tokens come only from the chat template's glue: message content is tokenised
as plain text (:mod:`tui_chat.engine.prompt`), and the prompt starts with exactly one
BOS token when the model wants one (issue 8).

KV cache reuse across turns: the engine remembers the prompt parts and tokens of the
previous prompt and reply. When the new prompt starts with those parts (the usual case:
history plus a new message), its tokens are the cached tokens plus the tokens of the
new parts alone, so re-tokenising the earlier reply can never move a token boundary
and waste the cache (case C20). Then only tokens after the longest common prefix with
the KV cache are evaluated.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    ContextOverflowError,
    EngineError,
    EngineEvent,
    ModelInfo,
    PrefillDone,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.modelfile import (
    ModelFileError,
    ModelHeader,
    check_model_file,
    checked_metadata,
)
from tui_chat.engine.prompt import Prompt, content, normalize, remainder, tokenize_parts
from tui_chat.engine.templates import ChatTemplate, choose_template


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
        model: a GGUF file already checked by
            :func:`~tui_chat.engine.modelfile.check_model_file` (the CLI checks it
            once, before anything loads), or a path, checked by :meth:`load`.
        n_ctx: context window in tokens.
        n_gpu_layers: layers to offload to the GPU; -1 offloads all (CUDA builds only,
            a CPU build ignores it).
        n_threads: CPU threads for decode; None lets llama-cpp-python choose
            (half the cores).
        n_batch: prompt tokens evaluated per batch; also the cancel granularity of a
            prefill.
        chat_format: ``--chat-format`` override, or None to choose automatically.
        log_path: the file llama.cpp's native log lines go to (see
            :mod:`tui_chat.engine.native_log`); None keeps them in memory only. They
            never reach the terminal either way.
        default_system_prompt: the system message for a conversation that has none,
            or None to render such a conversation as it is (a Jinja template may
            then write a system prompt of its own).
    """

    def __init__(
        self,
        model: ModelHeader | str | Path,
        *,
        n_ctx: int = 4096,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        n_batch: int = 256,
        chat_format: str | None = None,
        log_path: Path | None = None,
        default_system_prompt: str | None = None,
    ) -> None:
        self._header = model if isinstance(model, ModelHeader) else None
        self.model_path = model.path if isinstance(model, ModelHeader) else Path(model)
        self.n_ctx = n_ctx
        self.n_gpu_layers = n_gpu_layers
        self.n_threads = n_threads
        self.n_batch = n_batch
        self.chat_format = chat_format
        self.log_path = log_path
        self.default_system_prompt = default_system_prompt
        self._llm: Any = None
        self._template: ChatTemplate | None = None
        self._info: ModelInfo | None = None
        self._busy = threading.Lock()
        # Tokens of exactly self._cached_parts (prompt + reply of the last turn).
        self._cached_tokens: list[int] = []
        self._cached_parts: Prompt = ()
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

    def load(self) -> ModelInfo:
        """Load the GGUF (seconds).

        Returns:
            The loaded model's :class:`ModelInfo`; its ``notices`` hold one-line
            warnings for the user (GPU offload asked of a build without it, a chat
            template that could not be used).

        Raises:
            ModelFileError: the file is not a usable GGUF (see
                :func:`~tui_chat.engine.modelfile.check_model_file`) or llama.cpp
                could not load it; the message says why.
            EngineError: a ``--chat-format`` that does not fit the model.
        """
        header = self._header or check_model_file(self.model_path)
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

        n_before = len(native_log.recent_lines(200))
        try:
            llm = llama_cpp.Llama(
                model_path=str(header.path),
                n_ctx=self.n_ctx,
                n_gpu_layers=self.n_gpu_layers,
                n_threads=self.n_threads,
                n_batch=self.n_batch,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelFileError(self._load_failure(str(exc), n_before)) from exc
        except jinja2.TemplateError as exc:
            # llama-cpp-python compiles every chat template of the GGUF while loading,
            # and lets a syntax error escape from its constructor.
            raise ModelFileError(
                f"{self.model_path}: its chat template (tokenizer.chat_template) is not "
                f"valid Jinja ({str(exc)[:120]!r}), and llama-cpp-python will not load "
                "a file with a broken template"
            ) from exc
        self._llm = llm
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
                metadata, self.chat_format, bos_text, eos_text, strip_bos=self._bos is not None
            )
        except ValueError as exc:
            raise EngineError(str(exc)) from exc
        if note:
            notices.append(note)
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
                template's ``raise_exception``, or an error inside the template).
        """
        assert self._template is not None and self._prompt_vocab is not None
        import jinja2

        if self.default_system_prompt is not None and all(m["role"] != "system" for m in messages):
            messages = [{"role": "system", "content": self.default_system_prompt}, *messages]
        try:
            if messages and messages[-1]["role"] == "assistant":
                # Continue a reply: the prompt ends inside the assistant's turn, with its
                # text so far and no end-of-turn glue, so the model carries on the same
                # message. It is the prompt of the conversation before that reply
                # (which ends with the assistant's turn header) plus the reply's text:
                # the splice of that reply, so the KV cache is reused to its last token.
                head = self._template.render(messages[:-1])
                parts = normalize((*head, content(messages[-1]["content"])))
            else:
                parts = normalize(self._template.render(messages))
        except (jinja2.TemplateError, ValueError, TypeError, LookupError) as exc:
            # The message may come from the GGUF (a template's raise_exception): quoted.
            raise EngineError(
                f"the chat template failed on this conversation: {str(exc)[:200]!r}"
            ) from exc
        rest = remainder(parts, self._cached_parts) if self._cached_parts else None
        if rest is not None:
            return parts, self._cached_tokens + tokenize_parts(rest, self._prompt_vocab)
        bos = [self._bos] if self._bos is not None else []
        return parts, bos + tokenize_parts(parts, self._prompt_vocab)

    def _fit(
        self, messages: Sequence[ChatMessage], max_tokens: int
    ) -> tuple[Prompt, list[int], int]:
        """Drop the oldest turns (keeping system messages) until the prompt fits."""
        reserve = min(max_tokens, self.n_ctx // 4)
        msgs = list(messages)
        dropped = 0
        # The newest message is kept, and with a reply that is continued its question.
        keep = 2 if msgs and msgs[-1]["role"] == "assistant" else 1
        while True:
            parts, tokens = self.prompt_tokens(msgs)
            if len(tokens) + reserve <= self.n_ctx:
                return parts, tokens, dropped
            idx = next((i for i, m in enumerate(msgs[:-keep]) if m["role"] != "system"), None)
            if idx is None:
                raise ContextOverflowError(len(tokens), self.n_ctx, reserve)
            del msgs[idx]
            dropped += 1

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
        parts, tokens, dropped = self._fit(messages, params.max_tokens)
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
        # Forget the cached prompt until this turn's tokens are known.
        self._cached_parts, self._cached_tokens = (), []
        body = tokens[lcp:-1]
        for i in range(0, len(body), self.n_batch):
            if cancel.is_set():
                return
            llm.eval(body[i : i + self.n_batch])
        if cancel.is_set():
            return
        import llama_cpp

        llm.set_seed(params.seed if params.seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED)
        gen = llm.generate(
            tokens,
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            temp=params.temperature,
            repeat_penalty=params.repeat_penalty,
        )
        reply: list[int] = []
        first = True
        step_start = time.perf_counter()
        try:
            for token in gen:
                now = time.perf_counter()
                if first:
                    first = False
                    yield PrefillDone(
                        n_prompt_tokens=len(tokens),
                        n_evaluated=len(tokens) - lcp,
                        prefill_ms=(now - t0) * 1000,
                        trimmed_messages=dropped,
                    )
                step_ms = (now - step_start) * 1000
                if self._is_eog(self._vocab, token):
                    yield TokenPiece(b"", eog=True, step_ms=step_ms)
                    break
                reply.append(token)
                # Keep the splice state current at every step: the consumer may stop
                # iterating after any token (cancel, stop string, max tokens).
                yield TokenPiece(self._piece(token), step_ms=step_ms)
                if cancel.is_set() or len(reply) >= params.max_tokens:
                    break
                if len(tokens) + len(reply) >= self.n_ctx:
                    break
                step_start = time.perf_counter()
        finally:
            gen.close()
            reply_bytes = b"".join(self._piece(t) for t in reply)
            try:
                reply_text = reply_bytes.decode("utf-8")
            except UnicodeDecodeError:
                reply_text = ""
            tokens_of = self._prompt_vocab
            if reply_text and tokens_of and not any(tokens_of.is_control(t) for t in reply):
                self._cached_parts = normalize((*parts, content(reply_text)))
                self._cached_tokens = tokens + reply
            else:
                # A reply that holds a control token is not spliced into the next
                # prompt: there it is plain text like every other message.
                self._cached_parts, self._cached_tokens = parts, list(tokens)
            self.last_prompt_tokens = tokens

    def close(self) -> None:
        """Free the model (native memory). Safe to call twice."""
        self._cached_parts, self._cached_tokens = (), []
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()


def no_gpu_offload_notice(n_gpu_layers: int) -> str:
    """The warning for ``--n-gpu-layers`` on a llama-cpp-python build without GPU
    offload (``llama_supports_gpu_offload()`` is false): replay case C39, where such a
    run went on on the CPU without a word."""
    return (
        f"--n-gpu-layers {n_gpu_layers} asks for GPU offload, but this llama-cpp-python "
        "build has none (a CPU build, or no GPU found): the model runs on the CPU. "
        "For a CUDA build: make run CUDA=1 (needs the CUDA toolkit)"
    )
