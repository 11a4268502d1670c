"""The remote engine: an OpenAI-compatible server's streaming chat completions.

For a model that does not fit the machine the user sits at: it runs on an existing
serving engine (llama.cpp's ``llama-server``, vLLM, Ollama, llama-cpp-python's
``llama_cpp.server``) somewhere bigger, and :class:`RemoteEngine` speaks the protocol
they share: ``POST {api_base}/chat/completions`` with ``"stream": true``, answered as
server-sent events, one ``chat.completion.chunk`` per token or so, ended by
``data: [DONE]``. The server applies the chat template and its own stop rules.

It is an :class:`~tui_chat.engine.base.Engine` like the embedded one, so the worker
thread, token path, painting, status bar and cancel do not know which one runs: it
yields one :class:`PrefillDone` (when the first event arrives) and then a
:class:`TokenPiece` per event, as raw UTF-8 bytes.

Cancel: Esc must stop the server, not only our reading, and the engine thread may be
blocked in a socket read for as long as the server is silent (a long prefill). So the
engine registers a callback on the :class:`CancelToken` that shuts the request's TCP
connection down from the thread that sets the token. The blocked read returns at once,
and the server sees the client gone and stops generating (llama-cpp-python's server
checks after every token; llama.cpp's and vLLM's abort the request likewise). The
connection is found through httpx's documented ``trace`` request extension (the
``connect_tcp``/``start_tls`` events return the network stream) and the response's
``network_stream`` extension.

Streams as real servers send them (issue 19): an error inside a 200 stream (an
``error:`` line, ``data: {"error": ...}``) ends the reply with the server's message, the
text before it kept; a reply whose last chunk has a ``finish_reason`` ends within
:data:`FINISH_GRACE_S` even when ``[DONE]`` never comes; a conversation longer than the
server's context window is sent again without its oldest turns
(:mod:`tui_chat.engine.overflow`); and a server that cannot continue a reply says so
(:func:`continue_refusal`).

Reasoning models (issue 18): a server that splits the thinking from the answer streams
it in its own delta field, ``reasoning_content`` (llama-server, DeepSeek's API, vLLM
before late 2025) or ``reasoning`` (vLLM since, Ollama, OpenRouter). Those pieces are
yielded as ``TokenPiece(part="reasoning")``, and they count as the server's progress
like answer text: a long thinking phase is not a silent server. A server that does not
split sends the tags inside the content; :class:`PrefillDone` says they are
``<think>`` tags (:data:`~tui_chat.engine.reasoning.DEFAULT_FORMAT`), and the streaming
core splits them.

Everything a server sends is untrusted: error texts and model names are cut to one
line without control or format characters before they go into a message, and the
API key is never part of any message, log line or repr.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    EngineEvent,
    LoadProgressFn,
    ModelInfo,
    PrefillDone,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.overflow import (
    Attempt,
    ContextFull,
    Trimming,
    parse_error_body,
    read_context_full,
)
from tui_chat.engine.reasoning import DEFAULT_FORMAT, PartKind
from tui_chat.engine.sse import SSEError, SSEEvent, SSEParser

DEFAULT_READ_TIMEOUT_S = 60.0
"""Longest wait for the next token, in seconds (``--api-timeout``); the wait for the
first token includes the server's prefill."""
CONNECT_TIMEOUT_S = 10.0
"""Longest wait to connect (TCP and TLS) and to send the request, in seconds."""
MAX_ERROR_BODY_BYTES = 64 * 1024
"""How much of an error response we read, in bytes."""
MAX_REPLY_BODY_BYTES = 16 * 1024 * 1024
"""Largest non-streamed reply we accept (a server that ignores ``"stream": true``)."""
MAX_MESSAGE_CHARS = 300
"""A server's text inside one of our messages is cut to this many characters."""
FINISH_GRACE_S = 0.5
"""After the reply's end (a chunk with a ``finish_reason``, or ``[DONE]``), how long we
go on reading for the rest of the body, in seconds, before ending the reply ourselves.
Servers send ``[DONE]`` and end the body within milliseconds of the last chunk (a usage
or timings chunk may come between), and reading to the end lets the connection be
reused for the next request; but some servers and proxies never send ``[DONE]`` and
hold the connection open with keep-alive comments, which before this kept the reply
going until ``--api-timeout`` and then failed it (issue 19)."""
CONTEXT_FULL_STATUSES = (400, 413, 422)
"""HTTP statuses whose body is read for a context-window refusal (llama.cpp, vLLM,
OpenAI and llama-cpp-python answer 400; some proxies 413 or 422)."""
USER_AGENT = "tui-chat"


class RemoteHTTPError(EngineError):
    """The server answered with an HTTP error status; the message says what to do.

    Attributes:
        status_code: the HTTP status (401, 404, 429, 500, ...).
    """

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class RemoteModel:
    """One model a server offers (an entry of ``GET {api_base}/models``).

    Attributes:
        id: the name to send as ``model``, exactly as the server wrote it. Untrusted:
            sanitize it before showing it.
        owned_by: the ``owned_by`` field ("" when absent).
        n_ctx: the context window in tokens when the server says (vLLM's
            ``max_model_len``, llama-server's ``meta.n_ctx``), else None.
    """

    id: str
    owned_by: str = ""
    n_ctx: int | None = None


def list_models(
    api_base: str, *, api_key: str | None = None, timeout_s: float = CONNECT_TIMEOUT_S
) -> list[RemoteModel]:
    """The models an OpenAI-compatible server offers, from ``GET {api_base}/models``.

    Blocking (one HTTP request): call it from a worker thread, never the UI loop. Safe
    to call from any thread, also while a :class:`RemoteEngine` streams (it uses its
    own connection). Note that llama-cpp-python's server answers it only between
    replies (it takes the model lock).

    Args:
        api_base: the server's API root, usually ending in ``/v1``.
        api_key: sent as ``Authorization: Bearer``; None sends none.
        timeout_s: limit for connecting and for the answer, in seconds.

    Returns:
        The models in the server's order (may be empty).

    Raises:
        EngineError: bad URL, server not reachable, TLS failure, or a malformed list;
            :class:`RemoteHTTPError` for an HTTP error status (401, 404 when the
            server has no model list, ...). The message is one line for the user.
    """
    base = _check_base(api_base)
    with _new_client(api_key, connect_s=timeout_s, read_s=timeout_s) as client:
        return _fetch_models(client, base, api_key, timeout_s, timeout_s)


def chat_request_body(
    model: str | None, messages: Sequence[ChatMessage], params: SamplingParams
) -> dict[str, Any]:
    """The JSON body of one streaming chat-completion request.

    ``temperature``, ``top_p``, ``max_tokens`` and ``seed`` are the OpenAI fields;
    ``top_k``, ``min_p`` and ``repeat_penalty`` are llama.cpp's (its server and
    llama-cpp-python's read them; vLLM reads ``top_k`` and ``min_p``; others ignore
    fields they do not know). A seed of -1 (random) is left out. ``model`` None is left
    out (llama-cpp-python's and llama.cpp's servers then use the model they serve). A
    final assistant message asks the server to continue it (``continue_final_message``).

    A thinking budget (``params.reasoning_budget`` >= 0) is sent as
    ``thinking_budget_tokens``, llama-server's per-request field (its ``--reasoning-budget``
    sampler closes the thinking there, for a chat template whose thinking tags it
    knows; in builds from before March 2026, and in those where the server's own
    ``--reasoning-budget`` is set and takes precedence, it has no effect). vLLM and Ollama
    ignore fields they do not know (vLLM logs that it did); vLLM's own
    ``thinking_token_budget`` is not sent, as vLLM refuses every request that carries it
    unless the server was started with a reasoning parser (HTTP 400).

    The thinking switch (``params.thinking`` on or off) goes as
    ``chat_template_kwargs.enable_thinking``, which llama-server and vLLM hand to the
    chat template; ``params.reasoning_effort`` as OpenAI's ``reasoning_effort`` (vLLM
    for gpt-oss, Ollama; llama-server ignores it). ``auto`` and ``default`` send nothing.
    """
    body: dict[str, Any] = {
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "stream": True,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "repeat_penalty": params.repeat_penalty,
    }
    if model is not None:
        body["model"] = model
    if messages and messages[-1]["role"] == "assistant":
        # A reply that is continued (see continue_refusal for what each server does):
        # vLLM and SGLang need these fields (continue_final_message cannot go with
        # add_generation_prompt); llama.cpp's server and Ollama continue by themselves.
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    if params.seed >= 0:
        body["seed"] = params.seed
    if params.reasoning_budget >= 0:
        body["thinking_budget_tokens"] = params.reasoning_budget
    if params.thinking in ("on", "off"):
        # llama-server and vLLM pass these to the chat template (Qwen3's switch).
        body["chat_template_kwargs"] = {"enable_thinking": params.thinking == "on"}
    if params.reasoning_effort != "default":
        body["reasoning_effort"] = params.reasoning_effort  # OpenAI's field; gpt-oss, Ollama
    return body


LLAMA_CPP_PYTHON_CONTINUE = (
    "this server (llama-cpp-python's llama_cpp.server) cannot continue a reply: it starts "
    "a new one after it instead. Ctrl+R asks for a new reply"
)


def continue_refusal(owned_by: str) -> str | None:
    """Why a reply cannot be continued (Ctrl+G) on the server whose model list says
    ``owned_by``, as one line for the user; None when it can, or may.

    Each server names itself in its model list's ``owned_by`` (the response headers do
    not tell them apart: vLLM and llama-cpp-python both answer as uvicorn), and each
    treats a conversation that ends with an assistant message its own way:

    - ``llamacpp``, llama.cpp's ``llama-server``: continues the message by itself
      ("assistant prefill", on by default since 2025). A chat template with thinking
      on is refused with HTTP 400 "Assistant response prefill is incompatible with
      enable_thinking", which the user sees as the server's message.
    - ``vllm``: continues it when asked with ``continue_final_message``, which
      :func:`chat_request_body` sends.
    - ``me``, llama-cpp-python's ``llama_cpp.server``: renders its chat template with
      ``add_generation_prompt`` always on and reads neither field, so the model starts
      a new reply that came glued onto the old one ("byIn the heart...", issue 19).
      Refused.
    - anything else (Ollama, SGLang, LM Studio, a proxy): not known; the request is
      sent as for vLLM, and the servers that know the fields honour them.
    """
    if owned_by == "me":
        return LLAMA_CPP_PYTHON_CONTINUE
    return None


class RemoteEngine:
    """Engine that streams replies from an OpenAI-compatible server.

    Args:
        api_base: the server's API root (``http://127.0.0.1:8080/v1``); a trailing
            ``/`` is dropped.
        api_key: sent as ``Authorization: Bearer``; never shown, logged or stored.
        model: the model to ask for; None takes the first one the server lists.
        read_timeout_s: longest silence from the server before the reply fails, in
            seconds (the wait for the first token includes the server's prefill).
            Keep-alive comments do not count as progress.
        connect_timeout_s: limit for connecting and sending the request, in seconds.
            A cancel while the TCP connection is still being made (a host that does
            not answer) waits for this: the socket is not known before it connects.

    Raises:
        EngineError: ``api_base`` is not an http(s) URL, or the timeout is not > 0.
    """

    def __init__(
        self,
        api_base: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.api_base = _check_base(api_base)
        if not read_timeout_s > 0:
            raise EngineError(f"--api-timeout must be more than 0 s, got {read_timeout_s:g}")
        self.model = model
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._api_key = api_key or None
        self._client: httpx.Client | None = None
        self._info: ModelInfo | None = None
        self._models: list[RemoteModel] = []
        self._busy = threading.Lock()
        # The network stream of the pooled keep-alive connection, for a cancel that
        # comes before the next response's headers (a reused connection fires no
        # connect event).
        self._last_stream: Any = None

    def __repr__(self) -> str:
        return f"RemoteEngine({_display_url(self.api_base)!r}, model={self.model!r})"

    @property
    def info(self) -> ModelInfo | None:
        """The server's model (name cleaned for display), or None before :meth:`load`."""
        return self._info

    @property
    def stop_strings(self) -> Sequence[str]:
        """Empty: the server applies the chat template and stops at its turn markers."""
        return ()

    @property
    def models(self) -> list[RemoteModel]:
        """The models the server listed at :meth:`load` (empty if it lists none)."""
        return list(self._models)

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        """Check the server answers and pick the model (one ``GET /models``).

        ``on_progress`` is never called: the server holds the model, and its load is
        not ours to report or stop.

        A server without a model list (HTTP 404) is accepted when ``model`` is given
        or the server needs none. The list also says which server it is (``owned_by``:
        see :func:`continue_refusal`) and its context window when it tells (vLLM's
        ``max_model_len``, llama-server's ``meta.n_ctx``).

        Raises:
            EngineError: server not reachable, TLS failure, key refused (401/403), or
                another HTTP error; the message is one line for the user.
        """
        if self._client is None:
            self._client = _new_client(
                self._api_key, connect_s=self.connect_timeout_s, read_s=self.read_timeout_s
            )
        try:
            self._models = _fetch_models(
                self._client,
                self.api_base,
                self._api_key,
                self.connect_timeout_s,
                self.read_timeout_s,
                on_stream=self._remember_stream,
            )
        except RemoteHTTPError as exc:
            if exc.status_code != 404:
                raise
            self._models = []
        if self.model is None and self._models:
            self.model = self._models[0].id
        n_ctx = next((m.n_ctx for m in self._models if m.id == self.model and m.n_ctx), 0)
        # The server's name for itself: the chosen model's entry, else any (one server).
        owned_by = next(
            (m.owned_by for m in self._models if m.id == self.model),
            self._models[0].owned_by if self._models else "",
        )
        self._info = ModelInfo(
            name=_one_line(self.model, 80) if self.model else "server default model",
            n_ctx=n_ctx or 0,
            chat_format="server",
            continue_refused=continue_refusal(owned_by),
            thinking_switches=("thinking", "reasoning_effort"),  # the server decides
        )
        return self._info

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        """See :meth:`tui_chat.engine.base.Engine.generate`.

        ``PrefillDone`` comes with the server's first event (``prefill_ms`` is the
        time from sending the request to it; token counts are 0, the stream does not
        carry them; ``thinking`` is ``<think>``, for tags inside the content). One
        ``TokenPiece`` per event that has text, and two for an event with both thinking
        and answer text: the thinking first, with ``part="reasoning"``, then the content
        with ``part`` None. An end-of-generation piece when the server says
        ``finish_reason: stop``; nothing more for ``length`` (also when the reply was
        all thinking). Stops after ``params.max_tokens`` pieces, thinking included, even
        if the server does not (servers count thinking tokens in ``max_tokens`` too).
        Thinking text moves the ``read_timeout_s`` deadline like answer text.

        A server that says the prompt does not fit its context window is sent it again
        without the oldest turns, at most
        :data:`~tui_chat.engine.overflow.MAX_TRIM_RETRIES` times, before anything is
        yielded; ``PrefillDone.trimmed_messages`` then says how many messages were left
        out (``messages`` itself is not changed). A final assistant message (continue)
        sent to a server that cannot continue it (``info.continue_refused``) sends
        nothing and raises.

        Raises:
            EngineError: the server failed or broke the stream, reported an error in
                it, refused the prompt as too long however it was cut, or cannot
                continue a reply; the pieces yielded before stay valid (the partial
                reply is kept).
        """
        if self._client is None:
            raise EngineError("not connected to the server (load() was not called)")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("RemoteEngine entered by two threads at once")
        abort = _StreamAbort(self._last_stream)
        remove = cancel.on_set(abort.abort)
        try:
            yield from self._generate(self._client, messages, params, cancel, abort)
        finally:
            remove()
            self._last_stream = None if abort.aborted else abort.stream
            self._busy.release()

    def _remember_stream(self, stream: Any) -> None:
        self._last_stream = stream

    def close(self) -> None:
        """Close the connection pool. Safe to call twice."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    # ------------------------------------------------------------------ request
    def _generate(
        self,
        client: httpx.Client,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        cancel: CancelToken,
        abort: _StreamAbort,
    ) -> Iterator[EngineEvent]:
        if cancel.is_set():
            return
        refused = self._info.continue_refused if self._info else None
        if refused and messages and messages[-1]["role"] == "assistant":
            raise EngineError(refused)  # nothing is sent: the reply stays as it is
        known_n_ctx = (self._info.n_ctx if self._info else 0) or None
        trimming = Trimming(messages, params.max_tokens, known_n_ctx)
        attempt = trimming.latest
        t0 = time.perf_counter()
        while True:
            try:
                yield from self._request(client, attempt, params, cancel, abort, t0)
                return
            except _ContextFullError as exc:
                # Raised only before anything was yielded: the retry starts clean.
                shorter = trimming.after(exc.full)
                if shorter is None:
                    n_ctx = exc.full.n_ctx or known_n_ctx
                    message = _too_long_message(exc.detail, n_ctx, attempt.n_dropped)
                    raise EngineError(message) from None
                attempt = shorter
            if cancel.is_set():
                return

    def _request(
        self,
        client: httpx.Client,
        attempt: Attempt,
        params: SamplingParams,
        cancel: CancelToken,
        abort: _StreamAbort,
        t0: float,
    ) -> Iterator[EngineEvent]:
        """One request of a reply; raises :class:`_ContextFullError` for a refusal that
        says the prompt does not fit (before it yields anything)."""
        url = self.api_base + "/chat/completions"
        params = replace(params, max_tokens=attempt.max_tokens)
        body = chat_request_body(self.model, attempt.messages, params)
        response = self._send(client, url, body, cancel, abort)
        if response is None:
            return
        try:
            if response.status_code >= 400:
                raise self._refusal(response)
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" in content_type:
                try:
                    yield from self._events(response, params, cancel, t0, attempt.n_dropped, abort)
                except _EmptyStream:
                    response.close()
                    abort.drop()
                    failure = self._why_empty(client, url, body, cancel, abort)
                    if failure is not None:
                        raise failure from None
            else:
                yield from self._whole_reply(response, t0, attempt.n_dropped)
        except httpx.HTTPError as exc:
            if cancel.is_set():
                return
            raise EngineError(
                _stream_message(exc, self.read_timeout_s, self._api_key, _server_of(url))
            ) from None
        finally:
            response.close()

    def _send(
        self,
        client: httpx.Client,
        url: str,
        body: dict[str, Any],
        cancel: CancelToken,
        abort: _StreamAbort,
    ) -> httpx.Response | None:
        """POST ``body``; the response with its headers read (the caller closes it), or
        None when the request was cancelled."""
        request = client.build_request(
            "POST",
            url,
            json=body,
            headers={"Accept": "text/event-stream" if body.get("stream") else "application/json"},
            extensions={"trace": abort.trace},
        )
        try:
            response = client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if cancel.is_set():
                return None
            raise EngineError(
                _transport_message(
                    exc, url, self._api_key, self.connect_timeout_s, self.read_timeout_s
                )
            ) from None
        abort.attach(response.extensions.get("network_stream"))
        return response

    def _refusal(self, response: httpx.Response) -> EngineError:
        """The error for an HTTP error status: :class:`_ContextFullError` when the body
        says the prompt does not fit, else a :class:`RemoteHTTPError` that says why."""
        raw = _error_body(response)
        status = response.status_code
        if status in CONTEXT_FULL_STATUSES:
            full = read_context_full(parse_error_body(raw))
            if full is not None:
                said = _server_message(raw, self._api_key)
                return _ContextFullError(full, f"HTTP {status}" + (f": {said}" if said else ""))
        return _status_error(response, raw, self._api_key, self.model, self._models)

    def _why_empty(
        self,
        client: httpx.Client,
        url: str,
        body: dict[str, Any],
        cancel: CancelToken,
        abort: _StreamAbort,
    ) -> EngineError | None:
        """The failure behind an event stream that ended before its first event.

        llama-cpp-python's ``llama_cpp.server`` sends its 200 headers before its first
        chunk is made, so an error there (a prompt longer than its context window: "This
        model's maximum context length is 2048 tokens...") ends the stream empty and
        says nothing; the same request without streaming answers it with an HTTP error.
        So the request is sent again that way, with ``max_tokens`` 1 (should it succeed
        after all, it costs the server a prefill and one token), on a new connection
        (uvicorn closes the old one after the failure). None when cancelled meanwhile.
        """
        probe = self._send(client, url, {**body, "stream": False, "max_tokens": 1}, cancel, abort)
        if probe is None or cancel.is_set():
            return None
        try:
            if probe.status_code >= 400:
                return self._refusal(probe)
        finally:
            probe.close()
        return EngineError(
            "the server ended the reply before sending anything (an empty event stream)"
        )

    def _events(
        self,
        response: httpx.Response,
        params: SamplingParams,
        cancel: CancelToken,
        t0: float,
        n_dropped: int,
        abort: _StreamAbort,
    ) -> Iterator[EngineEvent]:
        parser = SSEParser()
        prefilled = False
        last = t0
        deadline = t0 + self.read_timeout_s
        n_pieces = 0
        finish: str | None = None
        done = False
        # Half of a surrogate pair carried to the next event, for each of the two
        # fields (a pair is never split between the thinking and the answer).
        carry: dict[PartKind | None, str] = {"reasoning": "", None: ""}
        seen = False  # any event at all
        grace: threading.Timer | None = None

        def start_grace() -> None:
            nonlocal grace
            if grace is None:
                # When it runs out, the shutdown wakes the blocked read (and the
                # connection is not reused).
                grace = threading.Timer(FINISH_GRACE_S, abort.abort)
                grace.daemon = True
                grace.start()

        try:
            for chunk in response.iter_bytes():
                now = time.perf_counter()
                if done:
                    continue  # the end of the body after [DONE]: read, so the connection is reused
                try:
                    events = parser.feed(chunk)
                except SSEError as exc:
                    raise EngineError(f"the server sent a malformed event stream ({exc})") from None
                for event in events:
                    seen = True
                    if event.data.strip() == b"[DONE]":
                        done = True
                        start_grace()
                        break
                    try:
                        choice = _parse_chunk(event, self._api_key)
                    except _ServerErrorEvent as exc:
                        full = None if prefilled else read_context_full(exc.payload)
                        if full is not None:
                            raise _ContextFullError(full, f"the server said: {exc.said}") from None
                        where = "mid-reply" if n_pieces else "before the reply"
                        raise EngineError(
                            f"the server reported an error {where}: {exc.said}"
                        ) from None
                    if choice is None:
                        continue
                    if not prefilled:
                        prefilled = True
                        yield PrefillDone(
                            0,
                            0,
                            (now - t0) * 1000,
                            trimmed_messages=n_dropped,
                            thinking=DEFAULT_FORMAT,
                        )
                        last = now
                    for part, text in choice.parts:
                        if not text:
                            continue
                        data, carry[part] = _content_bytes(text, carry[part])
                        if not data:
                            continue
                        if n_pieces >= params.max_tokens:
                            return  # a server that ignores max_tokens
                        n_pieces += 1
                        yield TokenPiece(data, step_ms=(now - last) * 1000, part=part)
                        last = now
                        deadline = now + self.read_timeout_s
                    if choice.finish_reason and finish is None:
                        finish = choice.finish_reason
                        start_grace()
                if cancel.is_set():
                    break
                if finish is None and not done and now > deadline:
                    # Keep-alive comments alone for read_timeout_s: the read timeout
                    # never fires, yet no text comes.
                    raise EngineError(_silence_message(self.read_timeout_s))
        except httpx.HTTPError:
            if not (done or finish is not None):
                raise
            # The reply had ended ([DONE] or a finish_reason); the body did not, or the
            # connection broke after it (the grace ran out, the server went away).
        finally:
            if grace is not None:
                grace.cancel()
        if cancel.is_set():
            return
        if not done and finish is None:
            if not seen:
                raise _EmptyStream
            raise EngineError(
                "the connection to the server was lost mid-reply (the stream ended "
                "before the server said it was done)"
            )
        for part, left in carry.items():
            if left:  # half of a surrogate pair that never got its other half
                yield TokenPiece("\ufffd".encode(), step_ms=0.0, part=part)
        if finish != "length":
            yield TokenPiece(b"", eog=True)

    def _whole_reply(
        self, response: httpx.Response, t0: float, n_dropped: int
    ) -> Iterator[EngineEvent]:
        """A server (or proxy) that ignored ``"stream": true`` and sent one JSON reply."""
        raw = _read_bounded(response, MAX_REPLY_BODY_BYTES)
        try:
            payload = json.loads(raw.decode("utf-8", "surrogateescape"))
        except ValueError:
            payload = None
        if isinstance(payload, dict) and ("error" in payload or payload.get("object") == "error"):
            # An error object with status 200 (LM Studio answers so, and some proxies).
            full = read_context_full(payload)
            said = _one_line(_message_of(payload), MAX_MESSAGE_CHARS, self._api_key)
            if full is not None:
                raise _ContextFullError(full, f"the server said: {said}")
            raise EngineError(f"the server reported an error: {said}")
        try:
            choice = payload["choices"][0]
            message = choice["message"]
            content = message["content"] or ""
            reasoning = _reasoning_of(message)
            reason = choice.get("finish_reason")
            if not isinstance(content, str):
                raise TypeError
        except (KeyError, IndexError, TypeError, AttributeError):
            snippet = _one_line(raw.decode("utf-8", "replace"), 80, self._api_key)
            raise EngineError(
                f"the server did not answer with an event stream: {snippet!r}"
            ) from None
        yield PrefillDone(
            0,
            0,
            (time.perf_counter() - t0) * 1000,
            trimmed_messages=n_dropped,
            thinking=DEFAULT_FORMAT,
        )
        for part, text in _Chunk(reasoning, content, reason).parts:
            data, carry = _content_bytes(text, "")
            if carry:
                data += "\ufffd".encode()
            if data:
                yield TokenPiece(data, part=part)
        if reason != "length":
            yield TokenPiece(b"", eog=True)


class _ContextFullError(EngineError):
    """The server said the prompt does not fit its context window (internal: the
    engine sends a shorter request, or raises a plain EngineError that says so).

    Attributes:
        full: what the server said of the sizes.
        detail: the server's answer for a message (``HTTP 400: ...``), cleaned.
    """

    def __init__(self, full: ContextFull, detail: str) -> None:
        super().__init__(f"the prompt does not fit the server's context window ({detail})")
        self.full = full
        self.detail = detail


class _EmptyStream(Exception):
    """The event stream ended normally before its first event (internal: see
    :meth:`RemoteEngine._why_empty`)."""


class _ServerErrorEvent(EngineError):
    """An error event inside a 200 stream (internal: :meth:`RemoteEngine._events` words
    the message).

    Attributes:
        said: the server's message, cleaned to one line.
        payload: the event's data as parsed JSON (or text), for
            :func:`~tui_chat.engine.overflow.read_context_full`.
    """

    def __init__(self, said: str, payload: Any) -> None:
        super().__init__(f"the server reported an error: {said}")
        self.said = said
        self.payload = payload


def _too_long_message(detail: str, n_ctx: int | None, n_dropped: int) -> str:
    """One line for a prompt that does not fit the server's window however it is cut."""
    window = f" of {n_ctx} tokens" if n_ctx else ""
    left = f", even with the {n_dropped} oldest messages left out" if n_dropped else ""
    return (
        f"the prompt does not fit the server's context window{window}{left} ({detail}); "
        "shorten the message, or start the server with a larger context"
    )


# ---------------------------------------------------------------- cancel plumbing
class _StreamAbort:
    """Shuts one request's TCP connection down from another thread (Esc, quit).

    ``shutdown(SHUT_RDWR)``, not ``close()``: on Linux, closing a socket does not wake a
    thread blocked reading it, while a shutdown makes the read return at once, and it
    sends the server a FIN, which is how it learns the client is gone. It does not
    block. For a TLS socket the plain ``socket.shutdown`` is called, so the TLS object
    the reading thread is using is not torn down under it.
    """

    def __init__(self, stream: Any) -> None:
        self._lock = threading.Lock()
        self._stream = stream
        self.aborted = False

    @property
    def stream(self) -> Any:
        """The network stream of the request's connection (None if not known yet)."""
        return self._stream

    def trace(self, name: str, info: Mapping[str, Any]) -> None:
        """httpx/httpcore ``trace`` extension: learn the connection as it is made."""
        if name.endswith((".connect_tcp.complete", ".start_tls.complete")):
            self.attach(info.get("return_value"))

    def attach(self, stream: Any) -> None:
        """This request uses ``stream``; shut it down at once if already aborted."""
        if stream is None:
            return
        with self._lock:
            self._stream = stream
            aborted = self.aborted
        if aborted:
            _shutdown(stream)

    def abort(self) -> None:
        """Shut the connection down (called on the thread that sets the CancelToken)."""
        with self._lock:
            self.aborted = True
            stream = self._stream
        if stream is not None:
            _shutdown(stream)

    def drop(self) -> None:
        """Shut the current connection down without stopping the request: the next one
        then goes on a new connection (the pool discards a connection that reads EOF)."""
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            _shutdown(stream)


def _shutdown(stream: Any) -> None:
    get_extra_info = getattr(stream, "get_extra_info", None)
    sock = get_extra_info("socket") if get_extra_info is not None else None
    if not isinstance(sock, socket.socket):
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, ValueError):
        pass  # already closed: nothing left to stop


# ------------------------------------------------------------------ HTTP helpers
def _new_client(api_key: str | None, *, connect_s: float, read_s: float) -> httpx.Client:
    headers = {"User-Agent": USER_AGENT}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return httpx.Client(
        headers=headers,
        timeout=httpx.Timeout(connect=connect_s, read=read_s, write=connect_s, pool=connect_s),
        limits=httpx.Limits(max_connections=2, max_keepalive_connections=1),
    )


def _check_base(api_base: str) -> str:
    """``api_base`` without a trailing slash. Raises EngineError if not an http(s) URL."""
    try:
        url: httpx.URL | None = httpx.URL(api_base.strip())
    except (httpx.InvalidURL, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise EngineError(
            f"--api-base must be an http:// or https:// URL such as "
            f"http://127.0.0.1:8080/v1, got {_one_line(_display_url(api_base), 80)!r}"
        )
    return str(url).rstrip("/")


def _display_url(url: str) -> str:
    """``url`` as we show it: no user name, password or query (they may hold secrets)."""
    try:
        parsed = httpx.URL(url)
        return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "(not a URL)"


def _server_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: how messages name the server."""
    parsed = httpx.URL(_display_url(url))
    return f"{parsed.scheme}://{parsed.host}" + (f":{parsed.port}" if parsed.port else "")


def _fetch_models(
    client: httpx.Client,
    base: str,
    api_key: str | None,
    connect_s: float,
    read_s: float,
    on_stream: Callable[[Any], None] | None = None,
) -> list[RemoteModel]:
    """``GET {base}/models``; ``on_stream`` gets the connection's network stream (the
    engine's next request may reuse that connection)."""
    url = base + "/models"
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise EngineError(_transport_message(exc, url, api_key, connect_s, read_s)) from None
    if on_stream is not None:
        on_stream(response.extensions.get("network_stream"))
    if response.status_code >= 400:
        raise _status_error(response, _error_body(response), api_key, None, [])
    try:
        entries = response.json()["data"]
        if not isinstance(entries, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise EngineError(
            f"{_display_url(url)} did not answer with a model list; is --api-base the "
            "server's API root (it usually ends in /v1)?"
        ) from None
    models = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        meta = entry.get("meta")
        n_ctx = entry.get("max_model_len")  # vLLM
        if n_ctx is None and isinstance(meta, dict):
            n_ctx = meta.get("n_ctx")  # llama-server (n_ctx_train is the model's, not its)
        models.append(
            RemoteModel(
                id=entry["id"],
                owned_by=str(entry.get("owned_by") or ""),
                n_ctx=n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None,
            )
        )
    return models


def _read_bounded(response: httpx.Response, limit: int) -> bytes:
    out = bytearray()
    for chunk in response.iter_bytes():
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out[:limit])


def _error_body(response: httpx.Response) -> bytes:
    """The start of an error response's body (empty if it cannot be read)."""
    try:
        return _read_bounded(response, MAX_ERROR_BODY_BYTES)
    except httpx.HTTPError:
        return b""


def _status_error(
    response: httpx.Response,
    raw: bytes,
    api_key: str | None,
    model: str | None,
    models: list[RemoteModel],
) -> RemoteHTTPError:
    """One line for an HTTP error status, with the server's own message (cleaned) from
    its body ``raw``."""
    status = response.status_code
    said = _server_message(raw, api_key)
    detail = f"HTTP {status}" + (f": {said}" if said else "")
    if status in (401, 403):
        text = (
            f"the server refused the request ({detail}); check the API key (--api-key, or "
            "TUI_CHAT_API_KEY / OPENAI_API_KEY in the environment)"
        )
    elif status == 404:
        if model is not None and response.request.url.path.endswith("/chat/completions"):
            names = ", ".join(_one_line(m.id, 60) for m in models[:8])
            listed = f"; it lists: {names}" if names else ""
            text = (
                f"the server has no model {_one_line(model, 80)!r} ({detail}){listed}; "
                "pick one with --api-model"
            )
        else:
            where = _display_url(str(response.request.url))
            text = (
                f"{where} was not found ({detail}); is --api-base the server's API root "
                "(it usually ends in /v1)?"
            )
    elif status == 429:
        retry = _one_line(response.headers.get("retry-after", ""), 20)
        wait = f"; try again in {retry} s" if retry.isdigit() else "; try again in a moment"
        text = f"the server is busy ({detail}){wait}"
    elif status >= 500:
        text = f"the server failed ({detail})"
    else:
        text = f"the server rejected the request ({detail})"
    return RemoteHTTPError(text, status)


def _server_message(raw: bytes, api_key: str | None) -> str:
    """The message inside an error body: OpenAI's ``{"error": {"message": ...}}``,
    FastAPI's ``{"detail": ...}``, a bare ``{"error": "..."}`` or ``{"message": ...}``,
    else the text itself. Cleaned to one line."""
    text = raw.decode("utf-8", "replace")
    try:
        payload = json.loads(text)
    except ValueError:
        return _one_line(text, MAX_MESSAGE_CHARS, api_key)
    return _one_line(_message_of(payload), MAX_MESSAGE_CHARS, api_key)


def _message_of(payload: Any) -> str:
    if isinstance(payload, dict):
        for key in ("error", "detail", "message"):
            if key in payload:
                return _message_of(payload[key])
        return json.dumps(payload)
    if isinstance(payload, str):
        return payload
    return json.dumps(payload)


REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where servers put the thinking in a delta (or a whole reply's message), apart from
the answer: ``reasoning_content`` is DeepSeek's name, which llama-server and vLLM
adopted; ``reasoning`` is Ollama's and OpenRouter's, and vLLM's since it renamed the
field (RFC 27755, November 2025; ``reasoning_content`` left its output in January
2026). A server may send both with the same text (mlx-vlm's does, for older clients),
so they are alternatives, read in this order, never joined."""


@dataclass(frozen=True)
class _Chunk:
    """What one ``chat.completion.chunk`` says of its first choice (internal).

    Attributes:
        reasoning: thinking text ("" for none).
        content: answer text, or text with the thinking tags inside ("" for none).
        finish_reason: the server's reason the reply ended, None while it goes on.
    """

    reasoning: str
    content: str
    finish_reason: str | None

    @property
    def parts(self) -> tuple[tuple[PartKind | None, str], tuple[PartKind | None, str]]:
        """The text by part, thinking first (it comes before the answer)."""
        return (("reasoning", self.reasoning), (None, self.content))


def _reasoning_of(message: dict[str, Any]) -> str:
    """The thinking in a delta or message (see :data:`REASONING_FIELDS`); "" for none.

    A value that is not a string (null, or a shape we do not know) is no thinking: these
    fields are extensions, and the answer should not fail over one we cannot read.
    """
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _parse_chunk(event: SSEEvent, api_key: str | None) -> _Chunk | None:
    """The first choice of a chunk; None for a chunk without choices (usage, timings).
    Raises EngineError for a malformed event, and :class:`_ServerErrorEvent` for an
    error: an ``error`` event (llama-server's ``error:`` line), an ``{"error": ...}``
    object (OpenAI's shape, also a bare string) or vLLM's ``{"object": "error",
    "message": ...}``.

    The data is decoded with ``surrogateescape``: bytes that are not UTF-8 (a server
    that split a character between two events without escaping it) survive into the
    text strings and are turned back into the same bytes by :func:`_content_bytes`.
    """
    text = event.data.decode("utf-8", "surrogateescape")
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if event.event == "error" and not isinstance(payload, dict):
        said = _one_line(event.data.decode("utf-8", "replace"), MAX_MESSAGE_CHARS, api_key)
        raise _ServerErrorEvent(said or "(no message)", said)
    if not isinstance(payload, dict):
        snippet = _one_line(event.data.decode("utf-8", "replace"), 80, api_key)
        raise EngineError(f"the server sent a malformed event: {snippet!r}")
    if event.event == "error" or "error" in payload or payload.get("object") == "error":
        said = _one_line(_message_of(payload), MAX_MESSAGE_CHARS, api_key)
        raise _ServerErrorEvent(said or "(no message)", payload)
    choices = payload.get("choices")
    if choices is None or choices == []:
        return None
    try:
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content") or ""
        reasoning = _reasoning_of(delta)
        reason = choice.get("finish_reason")
        if not isinstance(content, str) or not (reason is None or isinstance(reason, str)):
            raise TypeError
    except (TypeError, AttributeError, KeyError, IndexError):
        snippet = _one_line(event.data.decode("utf-8", "replace"), 80, api_key)
        raise EngineError(f"the server sent a malformed event: {snippet!r}") from None
    return _Chunk(reasoning, content, reason)


_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
# Surrogates that are neither half of a pair nor a byte kept by surrogateescape
# (U+DC80-U+DCFF).
_LONE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _join_pair(match: re.Match[str]) -> str:
    pair = match.group()
    return chr(0x10000 + ((ord(pair[0]) - 0xD800) << 10) + (ord(pair[1]) - 0xDC00))


def _content_bytes(content: str, carry: str) -> tuple[bytes, str]:
    """UTF-8 bytes of one event's text, and what to carry to the next event.

    Two ways a character reaches us split across events: a JSON ``\\ud83d`` escape
    whose partner ``\\udc4b`` comes in the next event (a high surrogate at the end is
    carried over), and raw bytes of an incomplete UTF-8 sequence (kept by
    ``surrogateescape``, turned back into bytes here; the stream decoder joins them).
    """
    text = carry + content
    carry = ""
    if text and "\ud800" <= text[-1] <= "\udbff":
        text, carry = text[:-1], text[-1]
    text = _PAIR.sub(_join_pair, text)
    text = _LONE.sub("\ufffd", text)
    return text.encode("utf-8", "surrogateescape"), carry


# ------------------------------------------------------------------- messages
def _one_line(text: str, limit: int, api_key: str | None = None) -> str:
    """Untrusted text fit for a one-line message: the API key replaced, control and
    format characters (ESC, bidi overrides, ...) replaced by ``?``, whitespace runs
    collapsed, cut to ``limit`` characters."""
    if api_key:
        text = text.replace(api_key, "[API key]")
    chars = [
        " " if ch.isspace() else "?" if unicodedata.category(ch)[0] == "C" else ch for ch in text
    ]
    line = " ".join("".join(chars).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _silence_message(timeout_s: float) -> str:
    return (
        f"the server sent no text for {timeout_s:g} s, so the reply was given up "
        "(a slow server needs a larger --api-timeout)"
    )


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _transport_message(
    exc: httpx.HTTPError, url: str, api_key: str | None, connect_s: float, read_s: float
) -> str:
    """One line for a failure to reach the server or to get its answer."""
    server = _server_of(url)
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "verify_message", None) or cause.reason or str(cause)
            return (
                f"TLS error talking to {server}: {_one_line(str(reason), 120, api_key)} (a "
                "plain-HTTP server needs an http:// --api-base; a private CA needs "
                "SSL_CERT_FILE)"
            )
    if isinstance(exc, httpx.ConnectTimeout):
        return f"cannot reach the server at {server}: no answer within {connect_s:g} s"
    if isinstance(exc, httpx.ConnectError):
        reason = "connection failed"
        for cause in _causes(exc):
            if isinstance(cause, ConnectionRefusedError):
                reason = "connection refused (is the server running, and the ssh tunnel up?)"
                break
            if isinstance(cause, socket.gaierror):
                reason = f"host name {httpx.URL(url).host!r} not found"
                break
            if isinstance(cause, OSError) and cause.strerror:
                reason = cause.strerror
                break
        return f"cannot reach the server at {server}: {_one_line(reason, 160, api_key)}"
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ReadTimeout):
        return f"the request to {server} timed out ({type(exc).__name__})"
    return _stream_message(exc, read_s, api_key, server)


def _stream_message(exc: httpx.HTTPError, read_s: float, api_key: str | None, server: str) -> str:
    """One line for a failure while reading the server's answer."""
    detail = _one_line(str(exc) or type(exc).__name__, 120, api_key)
    if isinstance(exc, httpx.ReadTimeout):
        return _silence_message(read_s)
    if isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError):
        return f"the connection to {server} was lost mid-reply ({detail})"
    return f"the request to {server} failed: {detail}"
