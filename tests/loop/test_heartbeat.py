"""What a long step tells while it runs (mint.loop.heartbeat): each kind of progress gets through the first time,
and repeats of one kind come at most once every HEARTBEAT_S, on the library's side and in `mint loop`'s lines."""
from mint.cli import main
from mint.loop.heartbeat import HEARTBEAT_S, Heartbeat


def progress(what: str, done: int = 1, *, step: str = "experience genui", iteration: int = 1) -> dict:
    return {"event": "progress", "iteration": iteration, "step": step, "what": what, "done": done, "total": 4,
            "detail": "", "share": None, "seconds": 1.0, "left_s": 60.0}


def clocked(*times: float) -> Heartbeat:
    ticks = iter(times)
    return Heartbeat(clock=lambda: next(ticks))


def test_a_message_of_another_kind_gets_through_right_after_the_last():
    heartbeat = clocked(0.0, 0.1)
    assert heartbeat.due(progress("round 1: prompts sampled", 4))
    assert heartbeat.due(progress("round 1: answers accepted", 3))


def test_repeats_of_one_kind_come_at_most_once_every_heartbeat():
    heartbeat = clocked(0.0, 1.0, HEARTBEAT_S - 0.1, HEARTBEAT_S, HEARTBEAT_S + 1.0)
    told = [heartbeat.due(progress("training", done)) for done in range(1, 6)]
    assert told == [True, False, False, True, False]


def test_the_same_kind_in_another_step_or_iteration_is_a_kind_of_its_own():
    heartbeat = clocked(0.0, 0.1, 0.2)
    assert heartbeat.due(progress("training", step="train genui"))
    assert heartbeat.due(progress("training", step="controls genui"))
    assert heartbeat.due(progress("training", step="train genui", iteration=2))


def test_mint_loop_prints_each_kind_of_a_burst_and_throttles_its_repeats(ws, monkeypatch, capsys):
    from mint.loop import runner

    def burst(_ws, _recipe, *, events, **_options):
        for event in (progress("round 1: prompts sampled", 1), progress("round 1: prompts sampled", 2),
                      progress("round 1: answers accepted", 3), progress("round 1: answers accepted", 4)):
            events(event)
        return runner.LoopResult("burst", "nothing new", 0, 0, message="nothing new")

    monkeypatch.setattr(runner, "run_loop", burst)
    (ws.home.parent / "mint.yaml").write_text("base: tiny-random\nspecialists: {genui: {}, chat: {}}\n")
    assert main(["loop", "burst.yaml"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("iteration 1 ")]
    assert [line.split(": ", 1)[1].split(" (")[0] for line in said] == ["round 1: prompts sampled 1/4",
                                                                         "round 1: answers accepted 3/4"]
