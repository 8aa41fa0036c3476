"""The answer a contract scored is the answer users get: for one revision and one suite, the greedy outputs `mint
eval` scored are, byte for byte, what `mint serve` answers to the same prompts (whole or streamed, batched with
other clients' turns as traffic comes)."""
import json
from concurrent.futures import ThreadPoolExecutor

from mint.project import DEFAULT_PROJECT, Project
from tests.contract.conftest import card_contract
from tests.contract.test_schema import GOOD

TINY_PROJECT = Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)
MAX_TOKENS = 16
REQUESTS = ["Show a card", "Show a card titled Weather in Oslo with today's forecast and a link", "A login form",
            "Make a dashboard of three cards: sales, costs and the margin between them", "A settings page"]


def test_the_answers_mint_eval_scored_are_the_answers_mint_serve_gives(ws, tmp_path, tiny_loras, crown):
    from openai import OpenAI

    from mint.contract.evaluate import evaluate
    from mint.contract.schema import load_contract, read_suite
    from mint.mol.mixture import Mixture
    from mint.serve.app import create_app
    from mint.serve.local import LocalBackend
    from mint.serve.server import start_background

    contract = card_contract(tmp_path, GOOD.replace("decoding: {max_new_tokens: 8, batch_size: 2}",
                                                    f"decoding: {{max_new_tokens: {MAX_TOKENS}, batch_size: 3}}"))
    rows = [{"messages": [{"role": "user", "content": text}], "reference": {"type": "Card"}} for text in REQUESTS]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    revision = crown("genui", tiny_loras["genui"])
    result = evaluate(ws, revision.ref, contract)          # the champion, beside its baseline (the bare base)
    scored = [json.loads(line)["outputs"][0] for line in open(result.predictions_path, encoding="utf-8")]
    loaded = load_contract(contract)
    asked = [loaded.harness().messages(record) for record in read_suite(loaded, loaded.suites[0])]

    running = start_background(create_app(LocalBackend(Mixture.open(ws, TINY_PROJECT), window_ms=50, poll_s=60)))
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{running.port}/v1", api_key="unused", max_retries=0, timeout=120)

        def ask(messages):
            return client.chat.completions.create(model="mint/genui", messages=messages, max_tokens=MAX_TOKENS,
                                                  temperature=0)

        with ThreadPoolExecutor(len(asked)) as clients:     # concurrent: the server batches them its own way
            replies = list(clients.map(ask, asked))
        chunks = list(client.chat.completions.create(model="mint/genui", messages=asked[1], max_tokens=MAX_TOKENS,
                                                     temperature=0, stream=True))
    finally:
        running.stop()
    assert [reply.choices[0].message.content for reply in replies] == scored
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == scored[1]
    assert {reply.model_extra["mint"]["served_by"] for reply in replies} == {revision.ref}
    assert len(set(scored)) > 1 and all(scored) and scored != base_outputs(ws, result)   # guards the test


def base_outputs(ws, result) -> list[str]:
    """The bare base's outputs in the report ``result`` was gated against."""
    from pathlib import Path

    from mint.registry import store

    conn = store.open_store(ws)
    try:
        [path] = conn.execute("SELECT path FROM reports WHERE id = ?", (result.report.baseline.report,)).fetchone()
    finally:
        conn.close()
    return [json.loads(line)["outputs"][0] for line in open(Path(path).parent / "predictions.jsonl", encoding="utf-8")]
