"""Chat templates: how a conversation becomes a prompt, and which strings end a turn.

Choice order (see :func:`choose_template`):

1. ``--chat-format NAME`` when given;
2. the GGUF's own ``tokenizer.chat_template`` (Jinja), rendered in the sandbox and
   with the globals transformers gives templates (:func:`jinja_template`), tried on a
   conversation when it is loaded (:func:`fit_jinja`): one that refuses the system role
   gets the system prompt folded into the first user message, one that renders nothing
   is replaced by the built-in format it resembles, and either says so once;
3. a built-in format chosen by ``general.architecture``.

Step 3 matters for the bundled Gemma 3 270M: its GGUF has no template, and
llama-cpp-python's fallback (llama-2 style) makes it answer with nothing (replay case
C13).

A template renders a :data:`~tui_chat.engine.prompt.Prompt`: the template's own text
(glue, where turn markers become special tokens) apart from each message's content
(plain text, so a user who types ``<start_of_turn>`` gets those characters, not a new
turn; issue 8). Rendered glue never starts with the BOS token's text when the engine
adds a BOS token id itself: many Jinja templates write ``{{ bos_token }}``.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tui_chat.engine.base import ChatMessage
from tui_chat.engine.prompt import Prompt, PromptPart, content, glue, normalize
from tui_chat.engine.reasoning import ThinkingFormat, thinking_format

if TYPE_CHECKING:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_TEMPLATE_CHARS = 1 << 20
"""Longest ``tokenizer.chat_template`` used (characters). Published templates are
a few kB (about 10 kB with tool calling); a longer one is not used."""


@dataclass(frozen=True)
class ChatTemplate:
    """A named prompt format.

    Attributes:
        name: the name ``--chat-format`` accepts.
        render: messages -> prompt parts ending with the assistant's turn header.
        stop_strings: turn markers that end a reply if the model writes them as text;
            the engine also stops on the model's end-of-generation tokens.
        fallback: the built-in format for a conversation this template cannot
            render (a Jinja template's :class:`RenderError`), or None.
        thinking: the tags the template puts around a reasoning model's thinking
            (:func:`~tui_chat.engine.reasoning.thinking_format`), or None.
        switches: the thinking switches the template reads (:data:`SWITCHES`:
            ``enable_thinking`` for Qwen3 and kin, ``reasoning_effort`` for gpt-oss).
        overrides: variables for the next renders, on top of the template's own (the
            engine sets a conversation's switches here before it renders; engine thread
            only). Shared by copies made with :func:`dataclasses.replace`.
    """

    name: str
    render: Callable[[Sequence[ChatMessage]], Prompt]
    stop_strings: tuple[str, ...]
    fallback: ChatTemplate | None = None
    thinking: ThinkingFormat | None = None
    switches: frozenset[str] = frozenset()
    overrides: dict[str, object] = field(default_factory=dict, compare=False)


SWITCHES = ("enable_thinking", "reasoning_effort")
"""Template variables that switch a reasoning model's thinking: ``enable_thinking``
(true/false: Qwen3, DeepSeek V3.1, GLM, SmolLM3...) and ``reasoning_effort``
(low/medium/high: gpt-oss, Command A). A template reads one if its source names it."""


def _merge_system(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Fold system messages into the first user message (formats with no system role)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system and rest and rest[0]["role"] == "user":
        rest[0]["content"] = f"{system}\n\n{rest[0]['content']}"
    elif system:
        rest.insert(0, {"role": "user", "content": system})
    return rest  # type: ignore[return-value]


def _render_gemma(messages: Sequence[ChatMessage]) -> Prompt:
    # Gemma's published turn format: roles "user" and "model", no system role.
    parts: list[PromptPart] = []
    for m in _merge_system(messages):
        role = "model" if m["role"] == "assistant" else "user"
        parts += [glue(f"<start_of_turn>{role}\n"), content(m["content"]), glue("<end_of_turn>\n")]
    parts.append(glue("<start_of_turn>model\n"))
    return normalize(parts)


def _render_chatml(messages: Sequence[ChatMessage]) -> Prompt:
    parts: list[PromptPart] = []
    for m in messages:
        parts += [glue(f"<|im_start|>{m['role']}\n"), content(m["content"]), glue("<|im_end|>\n")]
    parts.append(glue("<|im_start|>assistant\n"))
    return normalize(parts)


def _render_llama3(messages: Sequence[ChatMessage]) -> Prompt:
    parts: list[PromptPart] = []
    for m in messages:
        parts += [
            glue(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n"),
            content(m["content"]),
            glue("<|eot_id|>"),
        ]
    parts.append(glue("<|start_header_id|>assistant<|end_header_id|>\n\n"))
    return normalize(parts)


def _render_phi3(messages: Sequence[ChatMessage]) -> Prompt:
    parts: list[PromptPart] = []
    for m in messages:
        parts += [glue(f"<|{m['role']}|>\n"), content(m["content"]), glue("<|end|>\n")]
    parts.append(glue("<|assistant|>\n"))
    return normalize(parts)


def _render_plain(messages: Sequence[ChatMessage]) -> Prompt:
    # For base models with no turn tokens: a transcript the model continues.
    names = {"system": "", "user": "User: ", "assistant": "Assistant: "}
    parts: list[PromptPart] = []
    for m in messages:
        parts += [glue(names[m["role"]]), content(m["content"]), glue("\n")]
    parts.append(glue("Assistant:"))
    return normalize(parts)


BUILTIN_TEMPLATES: dict[str, ChatTemplate] = {
    t.name: t
    for t in (
        # "</end_of_turn>" too: small models sometimes spell the marker as an HTML
        # closing tag (replay case C14).
        ChatTemplate(
            "gemma",
            _render_gemma,
            ("<end_of_turn>", "</end_of_turn>", "<start_of_turn>", "<eos>"),
        ),
        ChatTemplate("chatml", _render_chatml, ("<|im_end|>", "</|im_end|>", "<|im_start|>")),
        ChatTemplate(
            "llama3",
            _render_llama3,
            ("<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|end_of_text|>"),
        ),
        ChatTemplate(
            "phi3", _render_phi3, ("<|end|>", "<|user|>", "<|assistant|>", "<|endoftext|>")
        ),
        ChatTemplate("plain", _render_plain, ("\nUser:", "\nAssistant:")),
    )
}

# general.architecture -> built-in format, for GGUFs without tokenizer.chat_template.
ARCH_TEMPLATES: dict[str, str] = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3n": "gemma",
    "qwen": "chatml",
    "qwen2": "chatml",
    "qwen2moe": "chatml",
    "qwen3": "chatml",
    "qwen3moe": "chatml",
    "llama": "llama3",
    "phi3": "phi3",
}

# Turn markers that also end a reply when a Jinja template uses them.
_KNOWN_MARKERS = tuple(
    dict.fromkeys(
        s for t in BUILTIN_TEMPLATES.values() if t.name != "plain" for s in t.stop_strings
    )
)


_MARK = "\ue000{nonce}:{index}\ue001"
"""Stands for message ``index``'s content while a Jinja template is rendered: private
use characters and a random nonce, so neither a template nor a message can hold it."""


def _reasoning_of(message: ChatMessage) -> str:
    """An assistant message's thinking ("" for none)."""
    return message.get("reasoning", "") if message["role"] == "assistant" else ""


def _split_marked(text: str, nonce: str) -> list[str | int] | None:
    """``text`` rendered with marks -> ``[glue, index, glue, index, ..., glue]``.

    None when a mark was cut, changed or partly kept (a template that slices, cases
    or searches the content): no content boundary can be trusted then.
    """
    pattern = re.compile("\ue000" + nonce + ":([0-9]+)\ue001")
    pieces: list[str | int] = []
    pos = 0
    for m in pattern.finditer(text):
        pieces += [text[pos : m.start()], int(m.group(1))]
        pos = m.end()
    pieces.append(text[pos:])
    glue_text = "".join(p for p in pieces if isinstance(p, str))
    if "\ue000" in glue_text or "\ue001" in glue_text or nonce in glue_text.lower():
        return None
    return pieces


def _fill(pieces: Sequence[str | int], contents: Sequence[str], real: str) -> Prompt:
    """Put each message's content in place of its mark, as the template rendered it.

    ``real`` is the template's output with the real contents. Where a template
    transforms content (``| trim`` is common), the transformed text is found by
    trying the content as is and stripped, each followed by the next glue. If
    ``real`` cannot be rebuilt that way, the glue is kept with the contents
    untransformed: the template's turn structure and plain-text content, never
    content parsed for special tokens.
    """
    out: list[PromptPart] = []
    pos = 0
    for k, item in enumerate(pieces):
        if isinstance(item, str):
            if not real.startswith(item, pos):
                break
            out.append(glue(item))
            pos += len(item)
            continue
        after = pieces[k + 1]
        assert isinstance(after, str)  # marks and glue alternate
        text = contents[item]
        for candidate in dict.fromkeys((text, text.strip(), text.lstrip(), text.rstrip())):
            if real.startswith(candidate, pos) and real.startswith(after, pos + len(candidate)):
                out.append(content(candidate))
                pos += len(candidate)
                break
        else:
            break
    else:
        if pos == len(real):
            return normalize(out)
    return normalize(glue(p) if isinstance(p, str) else content(contents[p]) for p in pieces)


class RenderError(ValueError):
    """A chat template could not render a conversation.

    The message says why; it may quote the GGUF (a template's ``raise_exception``), so
    it is shown through the sanitiser.
    """


_RESERVED_VARIABLES = frozenset({"messages", "add_generation_prompt"})


@functools.cache
def _sandbox() -> ImmutableSandboxedEnvironment:
    """The Jinja environment chat templates are written for, as transformers builds it.

    An immutable sandbox with ``trim_blocks`` and ``lstrip_blocks``; the loop controls
    ``{% break %}`` and ``{% continue %}`` (``jinja2.ext.loopcontrols``); Hugging Face's
    ``{% generation %}...{% endgeneration %}`` (it marks the assistant's tokens for a
    training mask; rendering keeps its body as it is); ``raise_exception(message)``;
    and ``tojson`` with transformers' arguments, which leaves ``<``, ``>``, ``&`` and
    non-ASCII text as they are (Jinja's own escapes them for HTML). ``namespace`` is
    Jinja's own. ``strftime_now`` is given per render (:func:`jinja_template`).
    Shared: it holds no state of a template or a render.
    """
    import json

    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.parser import Parser
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        tags = {"generation"}

        def parse(self, parser: Parser) -> nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            # A call block, so the body keeps its own scope as in transformers.
            block = nodes.CallBlock(self.call_method("_body"), [], [], body)
            return block.set_lineno(lineno)

        def _body(self, caller: Callable[[], str]) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise RenderError(message)

    def tojson(
        value: object,
        ensure_ascii: bool = False,
        indent: int | str | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, GenerationTag],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def jinja_template(
    source: str,
    bos_token: str,
    eos_token: str,
    *,
    strip_bos: bool = True,
    variables: Mapping[str, object] | None = None,
) -> ChatTemplate:
    """Build a template from a GGUF's ``tokenizer.chat_template`` (Jinja2, sandboxed).

    The template sees what transformers gives it (:func:`_sandbox`): ``messages``,
    ``add_generation_prompt`` (true), ``bos_token`` and ``eos_token``,
    ``strftime_now(format)`` (the local time, one instant for the whole render), and
    ``variables``. ``tools`` and ``documents`` stay undefined, as llama.cpp leaves them
    without tools: transformers sets them to None, which the tool-use templates of
    Command R+ and Hermes 2 Pro and 3 cannot iterate. llama.cpp also passes
    ``date_string``, ``datetime`` and ``enable_thinking`` (true); transformers does
    not, and neither do we unless ``variables`` says so.

    Each render runs the template twice: with the real messages, and with a unique
    mark in place of each message's content. The marks show where content goes, so
    the glue between them is the template's own text; content is then put back as
    the real rendering shows it (see :func:`_fill`).

    Args:
        source: the template.
        bos_token: text of the BOS token (the template's ``bos_token``).
        eos_token: text of the EOS token, also a stop string.
        strip_bos: remove a leading ``bos_token`` from the output (set when the
            engine adds the BOS token id itself).
        variables: more template variables, as transformers' ``apply_chat_template``
            keyword arguments (``enable_thinking=False``...); not ``messages`` or
            ``add_generation_prompt``.

    Raises:
        ValueError: the template does not compile, is over
            :data:`MAX_TEMPLATE_CHARS`, or ``variables`` names a reserved variable.
            Its render raises :class:`RenderError`: the template raised
            (``raise_exception``, an undefined variable...) or mangled the marks, so
            that no content boundary can be trusted.
    """
    import jinja2

    if len(source) > MAX_TEMPLATE_CHARS:
        raise ValueError(f"chat template of {len(source)} characters is too long")
    extra = dict(variables or {})
    if reserved := sorted(_RESERVED_VARIABLES & extra.keys()):
        raise ValueError(f"template variables {reserved} are set by the engine")
    try:
        compiled = _sandbox().from_string(source)
    except jinja2.TemplateError as exc:
        raise ValueError(f"chat template does not compile: {exc}") from exc

    overrides: dict[str, object] = {}

    def run(messages: list[dict[str, str]], now: datetime.datetime) -> str:
        try:
            text = compiled.render(
                bos_token=bos_token,
                eos_token=eos_token,
                strftime_now=now.strftime,
                **{**extra, **overrides},
                messages=messages,
                add_generation_prompt=True,
            )
        except RenderError:
            raise
        except Exception as exc:  # untrusted code: anything it raises is its failure
            raise RenderError(str(exc) or type(exc).__name__) from exc
        if strip_bos and bos_token and text.startswith(bos_token):
            text = text[len(bos_token) :]
        return text

    def render(messages: Sequence[ChatMessage]) -> Prompt:
        # An earlier reply's thinking goes to the template under the names templates
        # read (issue 18); most drop it from the history, some keep it (a preserve
        # option, or always). Either way it is message content: marked like the rest,
        # so it never becomes glue (no special tokens from model text).
        thinking = [i for i, m in enumerate(messages) if _reasoning_of(m)]
        contents = [m["content"] for m in messages] + [_reasoning_of(messages[i]) for i in thinking]
        slot = {i: len(messages) + k for k, i in enumerate(thinking)}
        now = datetime.datetime.now()

        def shown(m: ChatMessage, text: str, reasoning: str | None) -> dict[str, str]:
            out = {"role": m["role"], "content": text}
            if reasoning is not None:
                out.update(reasoning_content=reasoning, reasoning=reasoning, thinking=reasoning)
            return out

        real = run(
            [
                shown(m, m["content"], _reasoning_of(m) if i in slot else None)
                for i, m in enumerate(messages)
            ],
            now,
        )
        import secrets  # with hashlib and OpenSSL: 5 ms before the first frame (issue 16)

        nonce = secrets.token_hex(8)
        try:
            marked = run(
                [
                    shown(
                        m,
                        _MARK.format(nonce=nonce, index=i),
                        _MARK.format(nonce=nonce, index=slot[i]) if i in slot else None,
                    )
                    for i, m in enumerate(messages)
                ],
                now,
            )
        except RenderError:
            pieces = None
        else:
            pieces = _split_marked(marked, nonce)
        if pieces is None:
            raise RenderError("the chat template changes message content in a way that hides "
                              "where it is")  # fmt: skip
        return _fill(pieces, contents, real)

    def raw(messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> str:
        return str(
            compiled.render(
                bos_token=bos_token,
                eos_token=eos_token,
                strftime_now=datetime.datetime.now().strftime,
                **extra,
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
            )
        )

    stops = tuple(s for s in _KNOWN_MARKERS if s in source)
    if eos_token and eos_token not in stops:
        stops += (eos_token,)
    return ChatTemplate(
        "jinja",
        render,
        stops,
        thinking=thinking_format(lambda m: raw(m, False), lambda m: raw(m, True), source),
        switches=frozenset(v for v in SWITCHES if v in source and v not in extra),
        overrides=overrides,
    )


PROBE: tuple[ChatMessage, ...] = (
    {"role": "system", "content": "Answer in one sentence."},
    {"role": "user", "content": "Hello."},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "What is the capital of France?"},
)
"""The conversation a Jinja template is tried on when it is loaded."""


def fit_jinja(template: ChatTemplate, fallback: ChatTemplate) -> tuple[ChatTemplate, str | None]:
    """Try a Jinja template on :data:`PROBE` (with and without its system message).

    A template that refuses the system role (Gemma 2: "System role not supported")
    gets the system prompt folded into the first user message, as a paragraph before
    the user's text, as llama.cpp does for such templates (``chat.cpp``,
    ``system_message_not_supported``; it joins them with one newline, we with a blank
    line). A template that renders neither conversation is not used.

    Returns:
        The template to use (``template``, ``template`` with the fold, or
        ``fallback``), and a one-line note for the user when it is not ``template``
        as it is, else None. A template returned has ``fallback`` set.
    """
    probe = list(PROBE)
    try:
        template.render(probe)
    except RenderError as with_system:
        try:
            template.render(_merge_system(probe))
        except RenderError:
            return fallback, (
                f"the model's chat template cannot render a conversation "
                f"({str(with_system)[:200]!r}); using the built-in {fallback.name} format "
                "(--chat-format changes it)"
            )
        inner = template.render

        def folded(messages: Sequence[ChatMessage]) -> Prompt:
            return inner(_merge_system(messages))

        return replace(template, render=folded, fallback=fallback), (
            f"the model's chat template has no system role ({str(with_system)[:200]!r}): "
            "a system prompt is put at the start of the first user message"
        )
    return replace(template, fallback=fallback), None


# Turn markers in a Jinja template's source -> the built-in format that writes them.
_MARKER_FORMATS = (
    ("<start_of_turn>", "gemma"),
    ("<|im_start|>", "chatml"),
    ("<|start_header_id|>", "llama3"),
    ("<|assistant|>", "phi3"),
)


def _builtin_for(source: str, architecture: str) -> ChatTemplate:
    """The built-in format whose turn markers ``source`` uses, else by architecture."""
    for marker, name in _MARKER_FORMATS:
        if marker in source:
            return BUILTIN_TEMPLATES[name]
    return BUILTIN_TEMPLATES[ARCH_TEMPLATES.get(architecture, "chatml")]


def choose_template(
    metadata: Mapping[str, str],
    override: str | None,
    bos_token: str = "",
    eos_token: str = "",
    *,
    strip_bos: bool = True,
    variables: Mapping[str, object] | None = None,
) -> tuple[ChatTemplate, str | None]:
    """Pick the chat template for a model.

    Args:
        metadata: GGUF key/value metadata as strings, checked for type and size
            (:func:`tui_chat.engine.modelfile.checked_metadata`).
        override: ``--chat-format`` value or None. ``"jinja"`` forces the GGUF template.
        bos_token: text of the BOS token.
        eos_token: text of the EOS token, a stop string for Jinja templates.
        strip_bos: the engine adds the BOS token id itself, so a leading BOS text is
            removed from Jinja output.
        variables: more variables for a Jinja template (see :func:`jinja_template`).

    Returns:
        The template, and a one-line note for the user when the GGUF's own template
        is not used as it is (it does not compile, is too long, cannot render a
        conversation, or refuses the system role: :func:`fit_jinja`), else None.

    Raises:
        ValueError: unknown ``override``, or ``"jinja"`` asked of a GGUF with none
            or with one that cannot be used.
    """
    source = metadata.get("tokenizer.chat_template", "")
    arch = metadata.get("general.architecture", "")
    fallback = _builtin_for(source, arch)
    if override and override != "jinja":
        if override not in BUILTIN_TEMPLATES:
            names = ", ".join([*BUILTIN_TEMPLATES, "jinja"])
            raise ValueError(f"unknown --chat-format {override!r}; choose one of: {names}")
        return BUILTIN_TEMPLATES[override], None
    if override and not source:
        raise ValueError("--chat-format jinja: this GGUF has no tokenizer.chat_template")
    if not source:
        return BUILTIN_TEMPLATES[ARCH_TEMPLATES.get(arch, "chatml")], None
    try:
        template = jinja_template(
            source, bos_token, eos_token, strip_bos=strip_bos, variables=variables
        )
    except ValueError as exc:
        if override:
            raise ValueError(f"--chat-format jinja: {exc}") from exc
        # A broken template falls back to the built-in format it resembles.
        return fallback, (
            f"the model's chat template cannot be used ({str(exc)[:200]!r}); using the "
            f"built-in {fallback.name} format (--chat-format changes it)"
        )
    fitted, note = fit_jinja(template, fallback)
    if override and fitted is fallback:
        raise ValueError(f"--chat-format jinja: {note}")
    return fitted, note


def template_names() -> list[str]:
    """Names ``--chat-format`` accepts."""
    return [*BUILTIN_TEMPLATES, "jinja"]
