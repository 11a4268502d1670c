"""The model picker (F3), driven by keys at 80x24 (issue 11 part 5, issue 12 part 3).

Local files are read from their headers in a thread worker; files that are not
language models are listed with the reason (replay case C23's files); picking one
switches the engine on the engine thread while the keys answer; a failed load leaves
the app usable. With ``--api-base`` the picker lists the server's models. The last
test switches between the two bundled models for real.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.helpers import screen_text, shown_reply
from tests.remote.stub import StubServer, models_route, reply, status
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready, send
from tests.test_gguf_metadata import HOSTILE, assert_inert, write_gguf
from tui_chat.config import Config
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.engine.llama import LlamaEngine
from tui_chat.engine.modelfile import ModelFileInfo, describe_model_file
from tui_chat.engine.remote import RemoteEngine, RemoteModel
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.screens.models import ModelChoice, ModelPickerScreen, engine_factory_for
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.status import StatusBar
from tui_chat.ui.widgets.turns import AssistantTurn

SIZE = (80, 24)


@pytest.fixture
def server() -> Iterator[StubServer]:
    """A stub OpenAI-compatible server (tests/remote/stub.py) on a free port."""
    stub = StubServer()
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A model folder with files that are not usable chat models."""
    d = tmp_path / "more-models"
    d.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    (d / "empty.gguf").write_bytes(b"")
    write_gguf(d / "mmproj-vision.gguf", "clip")
    write_gguf(d / "hostile-name.gguf", "llama", {"general.name": HOSTILE})
    return d


def fake_factory(built: list[Config], **engine_kwargs: object) -> object:
    """An engine factory for ``app.engine_factory``: a fake named after the file."""

    def build(config: Config) -> FakeEngine:
        built.append(config)
        name = config.model.stem if config.model else "default-model"
        return FakeEngine([paced([f"from {name}", EOG], 0)], name=name, **engine_kwargs)  # type: ignore[arg-type]

    return build


async def open_picker(pilot: Pilot[int], app: ChatApp) -> ModelPickerScreen:
    await pilot.press("f3")
    await wait_for(lambda: isinstance(app.screen, ModelPickerScreen))
    screen = app.screen
    assert isinstance(screen, ModelPickerScreen)
    await wait_for(lambda: not screen.scanning, 30)
    await pilot.pause()
    return screen


async def go_to(pilot: Pilot[int], screen: ModelPickerScreen, stem: str) -> None:
    """Move the cursor to the row of the file ``stem`` with the arrow keys."""
    rows = screen.rows()
    target = next(
        i for i, r in enumerate(rows) if isinstance(r, ModelFileInfo) and r.path.stem == stem
    )
    delta = target - screen.table.cursor_row
    await pilot.press(*(["down"] * delta if delta > 0 else ["up"] * -delta))
    assert screen.table.cursor_row == target


def status_text(app: ChatApp) -> str:
    return app.query_one(StatusBar).text


async def test_lists_models_and_files_that_cannot_be_used_with_the_reason(
    folder: Path, model_path: Path, gemma_path: Path
) -> None:
    app = make_app(fake_config(model_dirs=(folder,)), FakeEngine(name="start"))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_picker(pilot, app)
        by_stem = {r.path.stem: r for r in screen.rows() if isinstance(r, ModelFileInfo)}
        smol, gemma = by_stem[model_path.stem], by_stem[gemma_path.stem]
        assert (smol.architecture, smol.quantisation, smol.n_ctx_train) == ("llama", "Q4_1", 8192)
        assert smol.has_chat_template and 130e6 < smol.n_params < 140e6
        assert (gemma.architecture, gemma.quantisation, gemma.has_chat_template) == (
            "gemma3", "Q4_K_M", False,
        )  # fmt: skip
        text = screen_text(app)
        assert "● SmolLM2-135M-Instruct" in text  # the model in use
        assert "gemma3" in text and "Q4_K_M" in text and "32768" in text
        assert "✗ empty" in text and "✗ model.safetensors" in text and "✗ mmproj-vision" in text
        reasons = {
            "model": "safetensors file",
            "empty": "is empty (0 bytes)",
            "mmproj-vision": "vision projector",
        }
        for stem, words in reasons.items():
            await go_to(pilot, screen, stem)
            await pilot.pause()
            assert words in screen_text(app), stem
            await pilot.press("enter")  # refused: the picker stays, nothing switches
            await pilot.pause()
            assert isinstance(app.screen, ModelPickerScreen)
        await go_to(pilot, screen, "hostile-name")
        await pilot.pause()
        painted = screen_text(app)
        assert_inert(painted.encode())
        assert "␛]52" in painted
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, ModelPickerScreen))
        assert app.session.model_info is not None and app.session.model_info.name == "start"


async def test_picking_switches_the_model_and_the_next_reply_comes_from_it(
    gemma_path: Path,
) -> None:
    built: list[Config] = []
    start = FakeEngine([paced(["from start", EOG], 0)], name="start")
    app = make_app(fake_config(), start)
    app.engine_factory = fake_factory(built)  # type: ignore[assignment]
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await send(pilot, "one")
        await finished(app, 1)
        screen = await open_picker(pilot, app)
        await go_to(pilot, screen, gemma_path.stem)
        await pilot.press("enter")
        await wait_for(lambda: app.session.model_info is not None
                       and app.session.model_info.name == gemma_path.stem)  # fmt: skip
        assert built[-1].model == gemma_path and start.closed
        await wait_for(lambda: gemma_path.stem in status_text(app))
        await send(pilot, "two")
        await finished(app, 2)
        assert app.last_reply is not None and app.last_reply.text == f"from {gemma_path.stem}"
        assert [m["content"] for m in app.session.messages()] == [
            "one", "from start", "two", f"from {gemma_path.stem}",
        ]  # fmt: skip
        # Back to the default model: built as without --model (its own system prompt rule).
        screen = await open_picker(pilot, app)
        assert f"● {gemma_path.stem[:20]}" in screen_text(app)
        await go_to(pilot, screen, "SmolLM2-135M-Instruct.Q4_1")
        await pilot.press("enter")
        await wait_for(lambda: app.session.model_info is not None
                       and app.session.model_info.name == "default-model")  # fmt: skip
        assert built[-1].model is None


async def test_keys_answer_while_the_new_model_loads(gemma_path: Path) -> None:
    gate = threading.Event()
    built: list[Config] = []

    def slow(config: Config) -> FakeEngine:
        built.append(config)
        gate.wait(30)  # the engine thread is busy "loading" until the test lets it go
        return FakeEngine([paced(["loaded", EOG], 0)], name="gemma-fake")

    app = make_app(fake_config(), FakeEngine(name="start"))
    app.engine_factory = slow
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(app)
            screen = await open_picker(pilot, app)
            await go_to(pilot, screen, gemma_path.stem)
            await pilot.press("enter")
            await wait_for(lambda: status_text(app) == f"loading │ {gemma_path.stem}")
            await pilot.press(*"typed")
            assert app.query_one(Composer).text == "typed"
            await pilot.press("enter")  # queued for the new model
            gate.set()
            await finished(app, 1)
            assert app.last_reply is not None and app.last_reply.text == "loaded"
            assert "gemma-fake" in status_text(app)
    finally:
        gate.set()


async def test_a_failed_load_says_why_and_the_old_model_answers(gemma_path: Path) -> None:
    app = make_app(fake_config(), FakeEngine([paced(["still me", EOG], 0)], name="start"))
    app.engine_factory = fake_factory([], load_error="not enough memory to load the model")  # type: ignore[assignment]
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        screen = await open_picker(pilot, app)
        await go_to(pilot, screen, gemma_path.stem)
        await pilot.press("enter")
        await wait_for(lambda: "not enough memory" in screen_text(app))
        await wait_for(lambda: app.session.state == "ready")
        assert "start" in status_text(app)
        await send(pilot, "hi")
        await finished(app, 1)
        assert app.last_reply is not None and app.last_reply.text == "still me"


async def test_the_real_factory_refuses_a_bad_file_before_unloading(
    tmp_path: Path, model_path: Path
) -> None:
    # A file that passes the picker's look (it was fine when listed) and is cut short
    # before it is picked: the real factory (make_engine) finds it, the old model stays.
    good = tmp_path / "soon-cut.gguf"
    good.write_bytes(model_path.read_bytes()[: 8 * 2**20])
    start = FakeEngine([paced(["old model", EOG], 0)], name="start")
    app = make_app(fake_config(model_dirs=(tmp_path,)), start)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        screen = await open_picker(pilot, app)
        await go_to(pilot, screen, "soon-cut")
        assert "incomplete" in screen_text(app)  # the picker said so already
        await pilot.press("enter")  # refused in the picker
        await pilot.press("escape")
        choice = ModelChoice("soon-cut", str(good), path=good)
        app.session.switch_engine(
            engine_factory_for(app.config, choice, app.engine_factory), "soon-cut"
        )
        await wait_for(lambda: "incomplete" in screen_text(app))
        assert not start.closed and app.session.state == "ready"


async def test_with_api_base_the_picker_lists_the_servers_models(server: StubServer) -> None:
    stub = server
    stub.routes["GET /v1/models"] = models_route(["alpha", "beta\x1b]0;T\x07"])
    stub.chat(reply("Hi from the server."))
    config = fake_config(api_base=stub.url, sampling=SamplingParams(max_tokens=32))
    app = make_app(config, RemoteEngine(stub.url))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_picker(pilot, app)
        await wait_for(lambda: "● alpha" in screen_text(app))
        text = screen_text(app)
        assert "2 models" in text
        assert_inert(text.encode())
        await pilot.press("down", "enter")
        await wait_for(lambda: app.session.engine_label == "beta\x1b]0;T\x07")
        engine = app.session.engine
        assert isinstance(engine, RemoteEngine) and engine.model == "beta\x1b]0;T\x07"
        await send(pilot, "hello")
        await finished(app, 1)
        assert stub.requests[-1].body["model"] == "beta\x1b]0;T\x07"
        assert "Hi from the server." in shown_reply(app.query(AssistantTurn).last())


async def test_the_pickers_columns_hold_each_row_before_any_frame(server: StubServer) -> None:
    # Textual's DataTable measures new cells when it is next idle; a frame drawn before
    # that cached the row cut to the old width for good: "● al…" under load in CI.
    stub = server
    stub.routes["GET /v1/models"] = models_route(["alpha"])
    app = make_app(fake_config(api_base=stub.url), RemoteEngine(stub.url))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_picker(pilot, app)
        name = "a-model-with-a-long-name"
        screen._listed(ModelPickerScreen.Listed([RemoteModel(name, "someone", 8192)], []))
        table = screen.table
        widths = [c.get_render_width(table) - 2 * table.cell_padding for c in table.ordered_columns]
        assert widths[0] >= len(f"  {name}") and widths[1] >= len("someone")
        await pilot.pause()
        assert f"  {name}" in screen_text(app)


async def test_a_servers_failure_is_said_in_the_picker(server: StubServer) -> None:
    stub = server
    app = make_app(fake_config(api_base=stub.url), RemoteEngine(stub.url))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        stub.routes["GET /v1/models"] = status(500, {"error": {"message": "models are down"}})
        await open_picker(pilot, app)
        text = screen_text(app)
        assert "0 models" in text and "the server failed (HTTP 500: models" in text
        await pilot.press("enter", "escape")  # nothing to pick; the app goes on
        await wait_for(lambda: not isinstance(app.screen, ModelPickerScreen))


def test_describe_reads_the_header_only(model_path: Path, tmp_path: Path) -> None:
    # A file whose header is whole but whose weights are cut: described, with the reason.
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model_path.read_bytes()[: 4 * 2**20])
    info = describe_model_file(cut)
    assert info.architecture == "llama" and info.n_ctx_train == 8192
    assert info.problem is not None and "incomplete" in info.problem
    assert describe_model_file(model_path, memory_bytes=2**20).problem is not None
    assert describe_model_file(model_path, memory_bytes=None).usable


@pytest.mark.real
async def test_real_switch_answers_with_the_other_model(model_path: Path, gemma_path: Path) -> None:
    params = SamplingParams(max_tokens=12, temperature=0.0, seed=1)
    config = fake_config(sampling=params, n_ctx=1024)
    from tui_chat.engines import make_engine

    app = make_app(config, make_engine(config))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        assert app.session.model_info is not None
        assert app.session.model_info.architecture == "llama"
        await send(pilot, "Hi.")
        await finished(app, 1, 120)
        screen = await open_picker(pilot, app)
        await go_to(pilot, screen, gemma_path.stem)
        await pilot.press("enter")
        await wait_for(lambda: app.session.model_info is not None
                       and app.session.model_info.architecture == "gemma3", 120)  # fmt: skip
        assert app.session.model_info.chat_format == "gemma"
        await send(pilot, "Name a colour.")
        await finished(app, 2, 120)
        got = app.last_reply
        assert got is not None and got.reason in ("stop", "length") and got.text.strip()
        conversation = app.session.messages()
    # The same conversation through Gemma alone, greedy: the same reply.
    reference = LlamaEngine(gemma_path, n_ctx=1024)
    try:
        reference.load()
        from tui_chat.engine.base import CancelToken
        from tui_chat.engine.stream import run_stream

        class Sink:
            def on_prefill(self, *_: object) -> None: ...
            def on_text(self, *_: object) -> None: ...

        result = run_stream(reference, conversation[:-1], params, CancelToken(), Sink())
    finally:
        reference.close()
    assert result.text == got.text
