"""A load notice (ModelInfo.notices) reaches the user once, inert: a toast in the app.

The engine says when GPU offload was asked of a build without it (C39) or when the
model's chat template could not be used; a notice may quote the model file, so it
goes through the sanitiser (C31).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_durability import hook
from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineEvent,
    LoadProgressFn,
    ModelInfo,
    PrefillDone,
    SamplingParams,
)
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.session import Notice, SessionEvent
from tui_chat.ui.app import make_app


class NoticeEngine(FakeEngine):
    """A fake engine whose load comes with notices."""

    def __init__(self, notices: tuple[str, ...]) -> None:
        super().__init__([])
        self.notices = notices

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        info = dataclasses.replace(super().load(on_progress=on_progress), notices=self.notices)
        self._info = info
        return info


async def test_each_load_notice_is_one_inert_toast() -> None:
    notices = (
        "--n-gpu-layers -1 asks for GPU offload, but this build has none",
        "template of \x1b]0;TITLE\x07 cannot be used",
    )
    app = make_app(fake_config(), NoticeEngine(notices))
    events: list[SessionEvent] = []
    async with app.run_test(size=(120, 30), notifications=True, message_hook=hook(events)) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await pilot.pause()
        shown = [e.text for e in events if isinstance(e, Notice)]
        assert shown == list(notices)  # each once; the app sanitizes what it shows
        await wait_for(lambda: "asks for GPU offload" in screen_text(app))
        assert "␛]0;TITLE␇" in screen_text(app)


class PromptNoticeEngine(FakeEngine):
    """A fake engine that says, with the first prompt only, that its template could not
    render the conversation (as LlamaEngine's PrefillDone.notices do)."""

    def _play(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        first = len(self.calls) == 1
        for event in super()._play(messages, params, cancel):
            if isinstance(event, PrefillDone) and first:
                event = dataclasses.replace(event, notices=("template \x1b[2J fell back",))
            yield event


async def test_a_notice_about_a_prompt_is_shown_once_inert() -> None:
    engine = PromptNoticeEngine([paced(["a", EOG], 0), paced(["b", EOG], 0)])
    app = make_app(fake_config(), engine)
    events: list[SessionEvent] = []
    async with app.run_test(size=(120, 30), notifications=True, message_hook=hook(events)) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        for text in ("one", "two"):
            app.composer.text = text
            await pilot.press("enter")
            await wait_for(lambda: not app.session.busy and app.session.queued() == [])
        await wait_for(lambda: "fell back" in screen_text(app))
        assert [e.text for e in events if isinstance(e, Notice)] == ["template \x1b[2J fell back"]
        assert "\x1b" not in screen_text(app)
