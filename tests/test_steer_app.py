"""Steer in the app (issue 20, item 1), with the fake engine: Ctrl+S while a reply streams
stops it, keeps it on screen marked, shows the correction as a user turn and streams the
answer to it; Enter still queues."""

from __future__ import annotations

from textual.pilot import Pilot
from textual.widgets import Static

from tests.helpers import screen_text, shown_reply
from tests.support import fake_config, wait_for
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.session.events import ReplyFinished, ReplyStarted
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.keys import STEER
from tui_chat.ui.messages import SessionUpdate
from tui_chat.ui.widgets.chat_view import ChatView
from tui_chat.ui.widgets.turns import STEERED_NOTE, AssistantTurn, UserTurn

SIZE = (100, 30)


def turns(app: ChatApp) -> list[tuple[str, str]]:
    """The turns on screen, in order: ("you", text) or ("model", text shown)."""
    out: list[tuple[str, str]] = []
    for turn in app.query_one(ChatView).turns():
        if isinstance(turn, UserTurn):
            out.append(("you", turn.source))
        elif isinstance(turn, AssistantTurn):
            out.append(("model", shown_reply(turn)))
    return out


async def steer(pilot: Pilot[int], app: ChatApp, text: str) -> None:
    """Write ``text`` in the composer (at once: on a loaded machine each key pressed
    through Pilot waits for a frame) and press the steer key."""
    app.composer.load_text(text)
    await pilot.press(STEER.keys)


async def test_ctrl_s_steers_the_reply_in_flight() -> None:
    engine = FakeEngine([paced(["word "] * 5000, 50), paced([*(["Cats sail. "] * 40), EOG], 20)])
    events: list[object] = []

    def hook(message: object) -> None:
        if isinstance(message, SessionUpdate):
            events.append(message.event)

    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await pilot.press(*"a dragon story", "enter")
        await wait_for(lambda: "word word word" in screen_text(app))
        await steer(pilot, app, "cats instead")
        # The answer to the correction streams: on screen while the reply is in flight.
        await wait_for(lambda: "Cats sail." in screen_text(app) and app.session.busy)
        await wait_for(lambda: app.n_replies_shown >= 2)
        await pilot.pause()

        finished = [e for e in events if isinstance(e, ReplyFinished)]
        assert [(e.reason, e.steered) for e in finished] == [("cancelled", True), ("stop", False)]
        started = [e for e in events if isinstance(e, ReplyStarted)]
        assert len(started) == 2
        partial = finished[0].text
        assert partial.startswith("word") and len(partial) < len("word ") * 5000

        shown = turns(app)
        assert [role for role, _ in shown] == ["you", "model", "you", "model"]
        assert shown[1][1] == partial
        assert shown[2] == ("you", "cats instead")
        assert shown[3][1] == "Cats sail. " * 40
        partial_turn = app.query_one(ChatView).turns()[1]
        assert isinstance(partial_turn, AssistantTurn)
        notes = [str(note.render()) for note in partial_turn.query(".note").results(Static)]
        assert notes == [STEERED_NOTE]
        correction = app.query_one(ChatView).turns()[2]
        assert isinstance(correction, UserTurn) and not correction.queued

        # The model got the partial reply, then the correction.
        assert engine.calls[1][1:] == [
            {"role": "assistant", "content": partial, "interrupted": True, "model": "fake-model"},
            {"role": "user", "content": "cats instead"},
        ]
        assert app.session.messages()[1]["interrupted"] is True


async def test_a_steer_goes_ahead_of_queued_messages() -> None:
    engine = FakeEngine(
        [paced(["word "] * 5000, 50), paced(["now", EOG], 20), paced(["later", EOG], 20)]
    )
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await pilot.press(*"talk", "enter")
        await wait_for(lambda: "word word" in screen_text(app))
        app.composer.load_text("queued one")
        await pilot.press("enter")  # Enter while it streams: queued
        await wait_for(lambda: "you · queued" in screen_text(app))
        await steer(pilot, app, "steer now")
        await wait_for(lambda: app.n_replies_shown >= 3)
        await pilot.pause()
        assert [call[-1]["content"] for call in engine.calls] == ["talk", "steer now", "queued one"]
        shown = turns(app)
        assert [text for _, text in shown[2:]] == ["steer now", "now", "queued one", "later"]
        assert [m["content"] for m in app.session.messages()][2:] == [
            "steer now",
            "now",
            "queued one",
            "later",
        ]
