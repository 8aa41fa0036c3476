"""A candidate's answers judged against its baseline's, example by example, in both orders
(docs/contracts.md, "A model judge").

Each example's answer is compared with the baseline's answer to the same request twice, the candidate's shown
first and then second. A verdict both orders give stands; one that changes with the order is a tie and counts as
a flip. Two identical answers tie without a call. An answer that addresses the judge (names answer A or B,
speaks to "the judge", tells it to ignore its instructions, rates itself, writes the prompt's own markers) is
degenerate: it loses without a call, whoever wrote it. Per example the candidate scores 1 (won), 0.5 (tied) or 0
(lost), the mean over its samples; ``<suite>.judge_win_rate`` is the mean over examples, and its paired delta is
the exact sign test on the examples won and lost (``mcnemar(wins, losses, n)``: the delta is (wins - losses) / n).
``<suite>.judge_flip_rate`` is the share of judged pairs whose verdict flipped. A candidate that wins with answers
much longer than the baseline's is flagged in the report: a judge that likes length is not a user that does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from mint.contract.judge import A, B, TIE, JudgeSession, judge_messages
from mint.contract.judge_schema import COMPARISON_METRICS, FLIP_RATE, JUDGE_METRICS, WIN_RATE
from mint.contract.paired import PairedDelta, mcnemar
from mint.contract.schema import Contract

# the candidate's answers this much longer than the baseline's, on average, with a judge win: flagged (the loop's
# guard, mint.loop.guards, rejects the same growth where the contract's metric did not gain)
LENGTH_GROWTH = 1.5
WIN, LOSS = 1.0, 0.0
DRAW = 0.5

_ADDRESSES_JUDGE = [re.compile(pattern, re.I) for pattern in (
    # naming the answers as the judge sees them, and saying which wins
    r"\b(?:response|answer|assistant|output|option|reply)\s*\(?[ab12]\)?\s+(?:is|was|seems|would be)\s+"
    r"(?:clearly\s+|much\s+|far\s+)?(?:better|best|superior|preferred|preferable|the winner)",
    # speaking to the judge: "as the judge you ...", "dear judge", "judge: choose ..."
    r"\bas (?:the|a|an|our) (?:judge|evaluator|grader|rater)\s*,?\s*(?:you|of (?:these|this|the) (?:answers|responses))",
    r"\b(?:dear|attention|hey|note to(?: the)?)\s+(?:judge|evaluator|grader|rater)\b",
    r"\b(?:judge|evaluator|grader|rater)\s*[,:]\s*(?:you|please|ignore|prefer|choose|pick|select|rate|score|give)\b",
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+)*(?:previous|prior|above|earlier|"
    r"preceding|other|system)\s+(?:instructions|prompts?|rules|directions|rubric)",
    # rating itself
    r"\b(?:rate|score|grade|judge)\s+(?:this|my)\s+(?:answer|response|reply)\b",
    r"\b(?:this|my)\s+(?:answer|response|reply)\s+(?:deserves|should (?:get|receive|be rated|be chosen|win)|"
    r"is the (?:best|better|winning))",
    r"\b(?:prefer|choose|pick|select)\s+(?:this|my)\s+(?:answer|response|reply)\b",
    # the judge's own reply, or the prompt's markers, written into an answer
    r"\bverdict\s*[:=]\s*\**\s*\[*\s*(?:a|b|tie)\b",
    r"\"verdict\"\s*:",
    r"\[\[\s*[ab]\s*\]\]",
    r"<<<\s*(?:end\s+)?(?:answer|conversation|reference)",
)]


def addresses_judge(answer: str) -> str | None:
    """What in ``answer`` speaks to the judge instead of the user (None when nothing does)."""
    for pattern in _ADDRESSES_JUDGE:
        found = pattern.search(answer)
        if found:
            return found.group(0)
    return None


@dataclass
class Judged:
    """One subject's judged answers: per suite, per example, the judge's scores (its metrics) and what decided
    them (None where it did not judge that example: the baseline has no answer to it); the judge's metrics; what
    the report says of the judge."""
    examples: dict[str, list[dict | None]]
    metrics: dict[str, float]
    facts: dict = field(default_factory=dict)

    def applied(self, metrics: dict, rows: list[dict]) -> tuple[dict, list[dict]]:
        """``metrics`` and the predictions ``rows`` with the judge's scores added to each row's ``scores``, and
        what decided them (``judge``, ``judge_rating``) beside."""
        for row in rows:
            found = self.examples.get(row["suite"])
            judged = found[row["index"]] if found is not None and row["index"] < len(found) else None
            if judged is not None:
                row["scores"] = {**row["scores"], **{k: v for k, v in judged.items() if k in JUDGE_METRICS}}
                row.update({k: v for k, v in judged.items() if k not in JUDGE_METRICS})
        return {**metrics, **self.metrics}, rows

    def beside(self, other: Judged) -> Judged:
        """These judgements and ``other``'s (of other metrics) of the same answers, as one."""
        examples = {name: [_merged(a, b) for a, b in zip(self.examples.get(name) or [None] * len(rows), rows)]
                    for name, rows in other.examples.items()}
        return Judged({**self.examples, **examples}, {**self.metrics, **other.metrics}, {**self.facts, **other.facts})


def _merged(first: dict | None, second: dict | None) -> dict | None:
    return second if first is None else first if second is None else {**first, **second}


@dataclass
class _Pair:
    """One sample's comparison: decided without the judge (``outcome``), or by the verdicts of two prompts."""
    candidate: str
    baseline: str
    outcome: float | None = None
    why: str | None = None
    degenerate: str | None = None       # whose answer addressed the judge: candidate, baseline or both
    prompts: tuple[int, int] | None = None


def judge_answers(session: JudgeSession, contract: Contract, suites, keys: dict[str, list[str]], outputs: dict,
                  baseline: dict[tuple[str, str], list]) -> Judged:
    """``outputs`` (per suite, per record: the subject's answers) judged against ``baseline[(suite, key)]`` (the
    baseline's answers to the record of that example key) on every suite that measures a judge metric."""
    harness = contract.harness()
    spec = session.spec
    prompts: list[list[dict]] = []
    planned: dict[str, list[list[_Pair] | None]] = {}
    for suite, records in suites:
        if not any(m in COMPARISON_METRICS for m in suite.metrics):
            continue
        planned[suite.name] = []
        for index, record in enumerate(records):
            theirs = baseline.get((suite.name, keys[suite.name][index]))
            if theirs is None:
                planned[suite.name].append(None)
                continue
            pairs = [_plan(_text(mine), _text(other)) for mine, other in zip(outputs[suite.name][index], theirs)]
            conversation = harness.messages(record)
            reference = record.get("reference") if isinstance(record.get("reference"), str) else None
            for pair in pairs:
                if pair.outcome is None:
                    pair.prompts = (len(prompts), len(prompts) + 1)
                    prompts += [judge_messages(spec.rubric, conversation, reference, pair.candidate, pair.baseline),
                                judge_messages(spec.rubric, conversation, reference, pair.baseline, pair.candidate)]
            planned[suite.name].append(pairs)
    asked = session.verdicts(prompts)
    examples = {name: [_example(pairs, asked.said) if pairs else None for pairs in rows]
                for name, rows in planned.items()}
    judged = Judged(examples, _metrics(contract, examples))
    judged.facts = {"endpoint": session.label, "calibration": session.calibration.to_dict()
                    if session.calibration else None, "calls": {"made": asked.made, "cached": asked.cached},
                    "suites": {name: _counts(rows) for name, rows in examples.items()},
                    "flags": length_flags(planned, judged.metrics)}
    return judged


def _text(answer) -> str:
    return answer if isinstance(answer, str) else str(answer)


def _plan(candidate: str, baseline: str) -> _Pair:
    """A comparison, decided here where the judge is not asked: the same answer twice ties, and an answer that
    addresses the judge loses."""
    if candidate.strip() == baseline.strip():
        return _Pair(candidate, baseline, DRAW, "the same answer")
    mine, theirs = addresses_judge(candidate), addresses_judge(baseline)
    if mine and theirs:
        return _Pair(candidate, baseline, DRAW, f"both answers address the judge ({mine!r}, {theirs!r})", "both")
    if mine:
        return _Pair(candidate, baseline, LOSS, f"the candidate's answer addresses the judge ({mine!r})", "candidate")
    if theirs:
        return _Pair(candidate, baseline, WIN, f"the baseline's answer addresses the judge ({theirs!r})", "baseline")
    return _Pair(candidate, baseline)


def _example(pairs: list[_Pair], verdicts: list[str]) -> dict:
    """An example's scores (the mean over its samples) and what decided each sample."""
    outcomes: list[float] = []
    flips: list[float] = []
    said: list[dict] = []
    for pair in pairs:
        if pair.prompts is None:
            outcomes.append(DRAW if pair.outcome is None else pair.outcome)
            said.append({"outcome": _word(pair.outcome), "why": pair.why,
                         **({"degenerate": pair.degenerate} if pair.degenerate else {})})
            continue
        first, second = verdicts[pair.prompts[0]], verdicts[pair.prompts[1]]
        shown_first = {A: WIN, B: LOSS}.get(first, DRAW)       # the candidate's answer was A
        shown_second = {A: LOSS, B: WIN}.get(second, DRAW)     # the candidate's answer was B
        flipped = shown_first != shown_second
        outcome = DRAW if flipped else shown_first
        outcomes.append(outcome)
        flips.append(float(flipped))
        said.append({"outcome": _word(outcome), "verdicts": [first, second], **({"flipped": True} if flipped else {})})
    return {WIN_RATE: sum(outcomes) / len(outcomes) if outcomes else DRAW,
            FLIP_RATE: sum(flips) / len(flips) if flips else None,
            "judge": said[0] if len(said) == 1 else {"samples": said}}


def _word(outcome: float | None) -> str:
    return "win" if outcome == WIN else "loss" if outcome == LOSS else TIE


def _metrics(contract: Contract, examples: dict[str, list[dict | None]]) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for suite in contract.suites:
        rows = [row for row in examples.get(suite.name, []) if row is not None]
        if suite.name not in examples or not rows:
            continue
        flips = [row[FLIP_RATE] for row in rows if row[FLIP_RATE] is not None]
        values = {WIN_RATE: sum(row[WIN_RATE] for row in rows) / len(rows),
                  FLIP_RATE: sum(flips) / len(flips) if flips else 0.0}
        metrics.update({f"{suite.name}.{name}": value for name, value in values.items() if name in suite.metrics})
    return metrics


def _counts(rows: list[dict | None]) -> dict:
    """What the report says of one suite's judging: examples won, lost and tied, pairs judged and flipped, answers
    that addressed the judge."""
    judged = [row for row in rows if row is not None]
    samples = [sample for row in judged for sample in (row["judge"].get("samples") or [row["judge"]])]
    degenerate = [sample.get("degenerate") for sample in samples]
    return {"examples": len(judged), "wins": sum(row[WIN_RATE] > DRAW for row in judged),
            "losses": sum(row[WIN_RATE] < DRAW for row in judged),
            "ties": sum(row[WIN_RATE] == DRAW for row in judged),
            "judged_pairs": sum("verdicts" in sample for sample in samples),
            "flipped": sum(bool(sample.get("flipped")) for sample in samples),
            "degenerate": {"candidate": sum(d in ("candidate", "both") for d in degenerate),
                           "baseline": sum(d in ("baseline", "both") for d in degenerate)}}


def length_flags(planned: dict[str, list[list[_Pair] | None]], metrics: dict[str, float]) -> list[str]:
    """A flag per suite where the candidate won with answers much longer than the baseline's."""
    flags = []
    for name, rows in planned.items():
        pairs = [pair for pairs in rows if pairs for pair in pairs]
        mine = sum(len(pair.candidate) for pair in pairs) / len(pairs) if pairs else 0.0
        theirs = sum(len(pair.baseline) for pair in pairs) / len(pairs) if pairs else 0.0
        rate = metrics.get(f"{name}.{WIN_RATE}")
        if rate is not None and rate > DRAW and theirs and mine > LENGTH_GROWTH * theirs:
            flags.append(f"{name}: the judge preferred answers {mine / theirs:.1f}x as long as the baseline's "
                         f"({mine:.0f} vs {theirs:.0f} characters on average; win rate {rate:.2f}): check that it "
                         "rewards content, not length")
    return flags


def judge_delta(rows: list[dict], suite: str, confidence: float) -> PairedDelta:
    """``<suite>.judge_win_rate``'s paired delta: the exact sign test on the examples the candidate won (scored
    above 0.5) and lost (below), over every judged example of ``suite``; the delta is (wins - losses) / n."""
    scores = [row["scores"].get(WIN_RATE) for row in rows if row["suite"] == suite]
    scores = [s for s in scores if isinstance(s, (int, float)) and not isinstance(s, bool)]
    wins = sum(s > DRAW for s in scores)
    losses = sum(s < DRAW for s in scores)
    return mcnemar(wins, losses, len(scores), confidence)
