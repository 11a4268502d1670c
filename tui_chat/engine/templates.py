"""Chat templates: how a conversation becomes prompt text, and which strings end a turn.

Choice order (see :func:`choose_template`):

1. ``--chat-format NAME`` when given;
2. the GGUF's own ``tokenizer.chat_template`` (Jinja), rendered in a sandbox;
3. a built-in format chosen by ``general.architecture``.

Step 3 matters for the bundled Gemma 3 270M: its GGUF has no template, and
llama-cpp-python's fallback (llama-2 style) makes it answer with nothing (replay case
C13). Rendered text never contains the BOS token: the engine adds exactly one BOS
token id itself, because many Jinja templates write ``{{ bos_token }}`` and llama.cpp's
tokenizer would add a second one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tui_chat.engine.base import ChatMessage


@dataclass(frozen=True)
class ChatTemplate:
    """A named prompt format.

    Attributes:
        name: the name ``--chat-format`` accepts.
        render: messages -> prompt text ending with the assistant's turn header.
        stop_strings: turn markers that end a reply if the model writes them as text;
            the engine also stops on the model's end-of-generation tokens.
    """

    name: str
    render: Callable[[Sequence[ChatMessage]], str]
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


def _render_gemma(messages: Sequence[ChatMessage]) -> str:
    # Gemma's published turn format: roles "user" and "model", no system role.
    parts = []
    for m in _merge_system(messages):
        role = "model" if m["role"] == "assistant" else "user"
        parts.append(f"<start_of_turn>{role}\n{m['content']}<end_of_turn>\n")
    parts.append("<start_of_turn>model\n")
    return "".join(parts)


def _render_chatml(messages: Sequence[ChatMessage]) -> str:
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _render_llama3(messages: Sequence[ChatMessage]) -> str:
    parts = [
        f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content']}<|eot_id|>"
        for m in messages
    ]
    parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


def _render_phi3(messages: Sequence[ChatMessage]) -> str:
    parts = [f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages]
    parts.append("<|assistant|>\n")
    return "".join(parts)


def _render_plain(messages: Sequence[ChatMessage]) -> str:
    # For base models with no turn tokens: a transcript the model continues.
    names = {"system": "", "user": "User: ", "assistant": "Assistant: "}
    parts = [f"{names[m['role']]}{m['content']}\n" for m in messages]
    parts.append("Assistant:")
    return "".join(parts)


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


def jinja_template(source: str, bos_token: str, eos_token: str) -> ChatTemplate:
    """Build a template from a GGUF's ``tokenizer.chat_template`` (Jinja2, sandboxed).

    A leading ``bos_token`` in the output is removed (the engine adds the BOS id).

    Raises:
        ValueError: the template does not compile.
    """
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        compiled = env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ValueError(f"chat template does not compile: {exc}") from exc

    def render(messages: Sequence[ChatMessage]) -> str:
        text = compiled.render(
            messages=[{"role": m["role"], "content": m["content"]} for m in messages],
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
            raise_exception=raise_exception,
        )
        if bos_token and text.startswith(bos_token):
            text = text[len(bos_token) :]
        return text

    stops = tuple(s for s in _KNOWN_MARKERS if s in source)
    if eos_token and eos_token not in stops:
        stops += (eos_token,)
    return ChatTemplate("jinja", render, stops)


def choose_template(
    metadata: Mapping[str, str], override: str | None, bos_token: str = "", eos_token: str = ""
) -> ChatTemplate:
    """Pick the chat template for a model.

    Args:
        metadata: GGUF key/value metadata as strings (llama-cpp-python's
            ``Llama.metadata``).
        override: ``--chat-format`` value or None. ``"jinja"`` forces the GGUF template.
        bos_token: text of the BOS token, stripped from Jinja output.
        eos_token: text of the EOS token, a stop string for Jinja templates.

    Raises:
        ValueError: unknown ``override``, or ``"jinja"`` asked for a GGUF with none.
    """
    source = metadata.get("tokenizer.chat_template", "")
    if override:
        if override == "jinja":
            if not source:
                raise ValueError("--chat-format jinja: this GGUF has no tokenizer.chat_template")
            return jinja_template(source, bos_token, eos_token)
        if override not in BUILTIN_TEMPLATES:
            names = ", ".join([*BUILTIN_TEMPLATES, "jinja"])
            raise ValueError(f"unknown --chat-format {override!r}; choose one of: {names}")
        return BUILTIN_TEMPLATES[override]
    if source:
        try:
            return jinja_template(source, bos_token, eos_token)
        except ValueError:
            pass  # a broken template falls back to the architecture's format
    arch = metadata.get("general.architecture", "")
    return BUILTIN_TEMPLATES[ARCH_TEMPLATES.get(arch, "chatml")]
