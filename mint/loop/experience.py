"""The self-improvement step: the champion answers prompts from the logs; its harness scores each answer.

For every prompt of the specialist in the dataset (the rows GRPO would train on: the
conversation before an answer, with its reference), the current champion (or the bare base
before there is one) samples ``samples`` answers. The specialist's reward, the same scorer its
contract and GRPO use, scores each one. Answers scoring at least ``threshold`` come back as
episodes rated +1 and the others as episodes rated -1, ingested into the loop's dataset as a
new version, so that SFT learns from the passing ones and DPO pairs a passing with a failing
answer to the same prompt. That is how generation k+1 learns from generation k's scored
experience.
"""
from __future__ import annotations

import hashlib
import json

from mint.render import conversation
from mint.workspace import Workspace, atomic_write_text


def gather_experience(ws: Workspace, *, dataset: str, specialist: str, base: str, project, samples: int = 4,
                      prompts: int = 16, temperature: float = 0.8, max_new_tokens: int = 256,
                      threshold: float = 1.0) -> dict:
    """Sample, score and ingest; returns counts, the mean reward and the new dataset version."""
    from mint.base import load_base
    from mint.data.datasets import iter_episodes
    from mint.data.ingest import ingest
    from mint.harness.base import HarnessSettings
    from mint.mol.generate import answer_ends, generate_batches
    from mint.registry import store
    from mint.train.examples import build_examples
    from mint.train.rewards import reward_functions

    champion, adapter_dir, model_base = None, None, base
    if store.db_path(ws).exists():
        from mint.registry.artifacts import load_revision

        conn = store.open_store(ws)
        try:
            target = store.alias_target(conn, specialist, "champion")
        finally:
            conn.close()
        if target:   # every file's hash checked before its weights are loaded, as promote and serve do
            champion, adapter_dir = load_revision(ws, target)
            model_base = champion.base or base
    rows = build_examples("grpo", iter_episodes(ws, dataset, None, specialist, split="train"),
                          dataset=f"{dataset} ({specialist})")
    rows = _distinct_prompts(rows)[:prompts]
    loaded = load_base(model_base)
    model = loaded.model
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.eval()
    settings = HarnessSettings(system=None, template="{prompt}", tools=None, max_new_tokens=max_new_tokens,
                               temperature=temperature, top_p=0.95, samples=samples, batch_size=8, timeout_s=10.0,
                               catalog=None, stop_at_answer_end=True)
    # each answer ends where it is complete (a JSON value, a call, a code block), as contracts v3 decode, not
    # at max_new_tokens: only the answer is scored, and the tokens past it cost as much as the answer's
    answers, _latency = generate_batches(model, loaded.tokenizer, [prompt_as_trained(r) for r in rows], settings,
                                         answer_end=answer_ends(specialist, settings))

    rewards = reward_functions(specialist, ())
    served_by = champion.ref if champion else f"base:{model_base}"
    episodes, passed, total_reward, scored = [], 0, 0.0, 0
    for row, outs in zip(rows, answers):
        completions = [[{"role": "assistant", "content": text}] for text in outs]
        columns = {"reference": [row.get("reference", "")] * len(outs), "tools": [row.get("tools", "[]")] * len(outs)}
        scores = [0.0] * len(outs)
        for reward in rewards:
            for i, value in enumerate(reward(prompts=[row["prompt"]] * len(outs), completions=completions, **columns)):
                scores[i] += (value or 0.0) / len(rewards)
        for text, score in zip(outs, scores):
            scored += 1
            total_reward += score
            good = score >= threshold and bool(text.strip())
            passed += good
            tools = json.loads(row.get("tools") or "[]")
            episodes.append({"messages": row["prompt"] + [{"role": "assistant", "content": text}],
                             **({"tools": tools} if tools else {}),
                             "feedback": {"rating": 1 if good else -1}, "specialist": specialist,
                             "served_by": served_by})
    folder = ws.home / "experience" / dataset
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\n".join(json.dumps(e, sort_keys=True) for e in episodes).encode()).hexdigest()[:16]
    path = folder / f"{specialist}-{digest}.jsonl"
    atomic_write_text(path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in episodes))
    result = ingest(ws, [path], dataset=dataset, project=project)
    return {"prompts": len(rows), "answers": scored, "passed": passed,
            "mean_reward": round(total_reward / scored, 4) if scored else None, "served_by": served_by,
            "file": str(path), "version": result.version, "episodes_added": result.episodes_added}


def prompt_as_trained(row: dict) -> list[dict]:
    """The row's prompt with its tools listed in the system turn (``mint.render``), as mint's training template
    shows them: without the listing an agent cannot know which functions it may call."""
    return conversation(row["prompt"], json.loads(row.get("tools") or "[]"))


def _distinct_prompts(rows: list[dict]) -> list[dict]:
    """One row per prompt (earlier experience repeats its prompts), preferring one with a reference answer,
    in a stable order that does not depend on the order of ingestion."""
    by_prompt: dict[str, dict] = {}
    for row in rows:
        key = hashlib.sha256(json.dumps(row["prompt"], sort_keys=True).encode()).hexdigest()
        if key not in by_prompt or (row.get("reference") and not by_prompt[key].get("reference")):
            by_prompt[key] = row
    return [by_prompt[k] for k in sorted(by_prompt)]
