"""Chat templates: how a conversation becomes a prompt, and which strings end a turn.

Choice order (see :func:`choose_template`):

1. ``--chat-format NAME`` when given;
2. the GGUF's own ``tokenizer.chat_template`` (Jinja), rendered in a sandbox;
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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tui_chat.engine.base import ChatMessage
from tui_chat.engine.prompt import Prompt, PromptPart, content, glue, normalize

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
    """

    name: str
    render: Callable[[Sequence[ChatMessage]], Prompt]
    stop_strings: tuple[str, ...]


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


def jinja_template(
    source: str,
    bos_token: str,
    eos_token: str,
    *,
    strip_bos: bool = True,
    fallback: ChatTemplate | None = None,
) -> ChatTemplate:
    """Build a template from a GGUF's ``tokenizer.chat_template`` (Jinja2, sandboxed).

    Each render runs the template twice: with the real messages, and with a unique
    mark in place of each message's content. The marks show where content goes, so
    the glue between them is the template's own text; content is then put back as
    the real rendering shows it (see :func:`_fill`). A template that mangles the marks
    renders with ``fallback`` instead.

    Args:
        source: the template.
        bos_token: text of the BOS token (the template's ``bos_token``).
        eos_token: text of the EOS token, also a stop string.
        strip_bos: remove a leading ``bos_token`` from the output (set when the
            engine adds the BOS token id itself).
        fallback: the built-in format for templates that mangle the marks.

    Raises:
        ValueError: the template does not compile, or is over
            :data:`MAX_TEMPLATE_CHARS`. Its render raises ``ValueError`` (the
            template's ``raise_exception``) or ``jinja2.TemplateError``.
    """
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    if len(source) > MAX_TEMPLATE_CHARS:
        raise ValueError(f"chat template of {len(source)} characters is too long")

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        compiled = env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ValueError(f"chat template does not compile: {exc}") from exc

    def run(messages: list[dict[str, str]]) -> str:
        text = compiled.render(
            messages=messages,
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
            raise_exception=raise_exception,
        )
        if strip_bos and bos_token and text.startswith(bos_token):
            text = text[len(bos_token) :]
        return text

    def render(messages: Sequence[ChatMessage]) -> Prompt:
        contents = [m["content"] for m in messages]
        real = run([{"role": m["role"], "content": m["content"]} for m in messages])
        import secrets  # with hashlib and OpenSSL: 5 ms before the first frame (issue 16)

        nonce = secrets.token_hex(8)
        try:
            marked = run(
                [
                    {"role": m["role"], "content": _MARK.format(nonce=nonce, index=i)}
                    for i, m in enumerate(messages)
                ]
            )
        except (jinja2.TemplateError, ValueError, TypeError, LookupError):
            pieces = None
        else:
            pieces = _split_marked(marked, nonce)
        if pieces is None:
            if fallback is None:
                raise ValueError("the chat template changes message content in a way "
                                 "that hides where it is")  # fmt: skip
            return fallback.render(messages)
        return _fill(pieces, contents, real)

    stops = tuple(s for s in _KNOWN_MARKERS if s in source)
    if eos_token and eos_token not in stops:
        stops += (eos_token,)
    return ChatTemplate("jinja", render, stops)


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

    Returns:
        The template, and a one-line note for the user when the GGUF's own template
        could not be used (it does not compile, or is too long), else None.

    Raises:
        ValueError: unknown ``override``, or ``"jinja"`` asked of a GGUF with none
            or with one that cannot be used.
    """
    source = metadata.get("tokenizer.chat_template", "")
    arch = metadata.get("general.architecture", "")
    fallback = _builtin_for(source, arch)
    if override:
        if override == "jinja":
            if not source:
                raise ValueError("--chat-format jinja: this GGUF has no tokenizer.chat_template")
            template = jinja_template(
                source, bos_token, eos_token, strip_bos=strip_bos, fallback=fallback
            )
            return template, None
        if override not in BUILTIN_TEMPLATES:
            names = ", ".join([*BUILTIN_TEMPLATES, "jinja"])
            raise ValueError(f"unknown --chat-format {override!r}; choose one of: {names}")
        return BUILTIN_TEMPLATES[override], None
    if source:
        try:
            template = jinja_template(
                source, bos_token, eos_token, strip_bos=strip_bos, fallback=fallback
            )
            return template, None
        except ValueError as exc:
            # A broken template falls back to the built-in format it resembles.
            return fallback, (
                f"the model's chat template cannot be used ({str(exc)[:200]!r}); using the "
                f"built-in {fallback.name} format (--chat-format changes it)"
            )
    return BUILTIN_TEMPLATES[ARCH_TEMPLATES.get(arch, "chatml")], None


def template_names() -> list[str]:
    """Names ``--chat-format`` accepts."""
    return [*BUILTIN_TEMPLATES, "jinja"]
