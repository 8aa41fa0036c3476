"""Traffic that drifted, served and learned from: a request served through `mint serve` is logged, read back by
the experience step and ingested as an episode, while a request of the contract's held-out drift suite never
reaches experience, even when users send it."""
import json
from pathlib import Path

from mint.loop import experience
from mint.loop.runner import run_loop

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "examples" / "logs" / "server_log.jsonl.gz"
SYSTEM = "Answer with one UI4A JSON component tree and nothing else."
PROFILE = "Show a profile card for Ana Silva, nurse, with a photo and a message button."
ALERT = "Show an alert card saying \"Backup complete\" with a view button."
HELD_OUT = "Show a stat card for Uptime at 99% with a details button."
# the trees the verifier passes for the two served drifted requests
ANSWERS = {PROFILE: json.dumps({"type": "Card", "props": {"title": "Ana Silva"}, "children": [
    {"type": "Image", "props": {"src": "https://img.example.com/ana.png", "alt": "Ana Silva"}},
    {"type": "Text", "props": {"text": "Nurse"}},
    {"type": "Button", "props": {"label": "Message", "action": "message:ana"}}]}),
    ALERT: json.dumps({"type": "Card", "props": {"title": "Backup complete"}, "children": [
        {"type": "Button", "props": {"label": "View", "action": "view"}}]})}

RECIPE = """\
recipe: drift
base: tiny-random
dataset: drift
loop: {{iterations: 2}}
steps:
  - ingest: {{sources: [{logs}]}}
  - serve: {{requests: requests.jsonl, max_tokens: 8, clients: 2, from_iteration: 2}}
  - experience: {{specialist: genui, sources: [served], samples: 2, prompts: 8, max_new_tokens: 8,
                 from_iteration: 2, batch_size: 2, min_steps: 1, max_steps: 1}}
  - train: {{specialist: genui, method: sft, plan: experience,
              set: {{max_steps: 1, per_device_train_batch_size: 2, max_length: 96, lora.r: 2}}}}
  - eval: {{specialist: genui, contract: contract.yaml}}
  - promote: {{specialist: genui}}
"""

CONTRACT = """\
contract: drift
version: 1
specialist: genui
harness:
  system: "{system}"
  catalog: {catalog}
  decoding: {{max_new_tokens: 8, temperature: 0.0, batch_size: 4}}
suites:
  - {{name: core, data: drift-heldout.jsonl}}
gates:
  - {{metric: core.parse_rate, no_regression: 0.05}}
promotion: {{min_examples: 1, auto: true}}
"""


def _requests(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                                     {"role": "user", "content": t}]}) + "\n" for t in texts))


def test_a_drifted_request_served_is_logged_ingested_and_learned_and_a_held_out_one_never_is(
        ws, tmp_path, monkeypatch):
    from mint.data.datasets import iter_episodes
    from mint.mol.turnlog import scan_turns

    _requests(tmp_path / "drift-heldout.jsonl", [HELD_OUT])
    # users send the two drifted requests, and also the held-out one (traffic does not know the suite)
    _requests(tmp_path / "requests.jsonl", [PROFILE, ALERT, HELD_OUT])
    (tmp_path / "contract.yaml").write_text(CONTRACT.format(system=SYSTEM,
                                                           catalog=ROOT / "contracts" / "ui4a" / "catalog.v1.json"))
    (tmp_path / "r.yaml").write_text(RECIPE.format(logs=LOGS))
    sampled = []

    def answer(ws, champion, base, specialist, chosen, **kw):     # the tiny base writes no trees: answer for it
        sampled.extend(p.prompt[-1]["content"] for p in chosen)
        return [[ANSWERS[p.prompt[-1]["content"]], "{broken"] for p in chosen]

    monkeypatch.setattr(experience, "_sample", answer)
    result = run_loop(ws, tmp_path / "r.yaml")
    ran = {(s.iteration, s.label): s.output for s in result.steps if s.status in ("ran", "failed")}
    served = ran[(2, "serve")]
    assert (served["requests"], served["served"], served["failed"]) == (3, 3, 0)
    turns, _skipped = scan_turns(ws)                                       # served, logged
    assert sorted(t["messages"][-2]["content"] for t in turns) == sorted([PROFILE, ALERT, HELD_OUT])
    gathered = ran[(2, "experience genui")]
    assert gathered["sources"]["served"]["heldout"] == 1                     # the suite's request, left out
    assert sorted(sampled) == sorted([PROFILE, ALERT])                       # ... and never sampled
    assert gathered["sources"]["served"]["accepted"] == 2
    learned = {e["messages"][-2]["content"]: e["messages"][-1]["content"]
               for e in iter_episodes(ws, "drift", gathered["version"]) if (e.get("feedback") or {}).get("rating") == 1
               and e["messages"][-2]["content"] in (PROFILE, ALERT, HELD_OUT)}
    assert learned == ANSWERS                                                # ingested; the held-out one is not
    trained = ran[(2, "train genui")]
    assert trained["plan"]["new_examples"] == 2                              # and generation 2 learned from them
