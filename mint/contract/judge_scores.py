"""A subject's answers rated one by one by the contract's judge, on the scale its ``judge.score`` declares
(docs/contracts.md, "A model judge").

Where a suite measures ``judge_score``, the judge sees the rubric, the conversation, the reference where the record
has one, and one answer, and rates it with a whole number on the scale (mint.contract.judge reads the rating
strictly: a number off the scale, or not whole, is no rating). An answer that addresses the judge is degenerate,
as in a comparison: it gets the scale's lowest rating without a call. Per example the score is the mean rating of
its samples; ``<suite>.judge_score`` is the mean over examples. Every answer is rated, the baseline's too (the
bare base, a champion measured as a baseline, predictions given as a baseline), so a gate compares the two
ratings example by example with the paired bootstrap, like any other score.
"""
from __future__ import annotations

from mint.contract.judge import JudgeSession, rating_messages
from mint.contract.judge_pairs import Judged, addresses_judge
from mint.contract.judge_schema import SCORE
from mint.contract.schema import Contract

RATING = "judge_rating"     # a predictions row's key for what decided its judge_score


def rate_answers(session: JudgeSession, contract: Contract, suites, outputs: dict) -> Judged:
    """``outputs`` (per suite, per record: the subject's answers) rated on every suite that measures
    ``judge_score``."""
    spec = session.spec
    assert spec.scale is not None
    low = spec.scale[0]
    harness = contract.harness()
    prompts: list[list[dict]] = []
    planned: dict[str, list[list[tuple[int | None, str | None]]]] = {}
    for suite, records in suites:
        if SCORE not in suite.metrics:
            continue
        planned[suite.name] = []
        for index, record in enumerate(records):
            conversation = harness.messages(record)
            reference = record.get("reference") if isinstance(record.get("reference"), str) else None
            samples: list[tuple[int | None, str | None]] = []
            for answer in outputs[suite.name][index]:
                text = answer if isinstance(answer, str) else str(answer)
                degenerate = addresses_judge(text)
                if degenerate:
                    samples.append((None, degenerate))
                    continue
                samples.append((len(prompts), None))
                prompts.append(rating_messages(spec.rubric, conversation, reference, text, spec.scale))
            planned[suite.name].append(samples)
    asked = session.scores(prompts)
    examples: dict[str, list[dict | None]] = {}
    for name, rows in planned.items():
        examples[name] = []
        for samples in rows:
            ratings = [low if prompt is None else asked.said[prompt] for prompt, _why in samples]
            said = [{"score": score, **({"degenerate": why} if why else {})}
                    for score, (_prompt, why) in zip(ratings, samples)]
            examples[name].append({SCORE: sum(ratings) / len(ratings) if ratings else None,
                                   RATING: said[0] if len(said) == 1 else {"samples": said}})
    metrics = {}
    for suite in contract.suites:
        scored = [row[SCORE] for row in examples.get(suite.name, []) if row and row[SCORE] is not None]
        if scored and SCORE in suite.metrics:
            metrics[f"{suite.name}.{SCORE}"] = sum(scored) / len(scored)
    facts = {"endpoint": session.label,
             "calibration": session.calibration.to_dict() if session.calibration else None,
             "ratings": {"scale": list(spec.scale), "calls": {"made": asked.made, "cached": asked.cached},
                         "suites": {name: _counts(rows, planned[name]) for name, rows in examples.items()}}}
    return Judged(examples, metrics, facts)


def _counts(rows: list[dict | None], planned: list[list[tuple[int | None, str | None]]]) -> dict:
    """What the report says of one suite's ratings: the examples, their mean score, the answers rated by the
    judge and those that addressed it (rated lowest without a call)."""
    scores = [row[SCORE] for row in rows if row is not None and row[SCORE] is not None]
    samples = [sample for row in planned for sample in row]
    return {"examples": len(scores), "mean": sum(scores) / len(scores) if scores else None,
            "rated": sum(prompt is not None for prompt, _why in samples),
            "degenerate": sum(prompt is None for prompt, _why in samples)}
