"""What an evaluation asks and what it keeps of the answers, whichever engine decodes them (mint's own,
``mint.contract.evaluate``, or a served one, ``mint.contract.served``): the conversations a suite's records
become, a record's id, the decoding identity that says when two answers to one prompt are alike, and each
subject's answers per suite."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from mint.contract.schema import Contract

BASE = "base"     # the bare base's key among the subjects a stream decodes


def evaluation_conversations(harness, suites) -> list[list[dict]]:
    """What the model is asked for each record of ``suites``, in order: the harness's system turn (with its
    tools listed) and request, as ``mint.render`` shows a conversation."""
    return [harness.messages(r) for _suite, records in suites for r in records]


def record_id(record: dict):
    """A suite record's own id (``id``, or HumanEval's ``task_id``), or None."""
    return record.get("id", record.get("task_id"))


# mint's decoding engine: bump when the same prompt, settings, precision and base decode to other answers, so
# answers decoded before are not taken for today's
DECODER_VERSION = 1


def decoding_identity(contract: Contract, precision_used: str, fingerprint: str, engine: dict | None = None) -> str:
    """Everything besides the prompt's tokens that decides what a subject answers: the engine, the harness (its
    answer ends), the decoding settings (not batch_size: a row's answer never depends on the rows beside it),
    the precision and the base. Two evaluations with the same identity give one prompt the same answer.
    ``engine``: a served engine's identity (mint.contract.served); mint's own adds nothing, so the answers its
    reports hold keep their identity."""
    s = contract.settings
    fields = {"decoder": DECODER_VERSION, "harness": contract.harness_name, "max_new_tokens": s.max_new_tokens,
              "temperature": s.temperature, "top_p": s.top_p, "samples": s.samples,
              "stop_at_answer_end": s.stop_at_answer_end, "prompt_lookup": s.prompt_lookup,
              "precision": precision_used, "base": fingerprint, **({"engine": engine} if engine else {})}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


@dataclass
class Answers:
    """One subject's answers per suite, decoded now or taken from earlier reports, in the suites' order."""
    outputs: dict[str, list]
    latencies: dict[str, list]
    prompts: dict[str, list]        # each answer's prompt digest
    tokens: dict[str, int]          # tokens decoded now
    reused: dict[str, int]          # answers taken from earlier reports ...
    reused_from: dict[str, set]     # ... and which

    def reuse_facts(self, name: str) -> dict:
        return {"reused": self.reused[name], "reused_from": sorted(self.reused_from[name])} if self.reused[name] else {}


def gather_answers(suites, owners: list, own: set[str], fresh: dict[int, tuple], reuse: dict[str, dict],
                   digests: list[str]) -> Answers:
    """A subject's answers on the suites ``own`` names: conversation ``c``'s from ``fresh[c]`` (outputs, latency,
    tokens) where it was decoded now, else the earlier report's row ``reuse`` holds for its prompt digest."""
    names = [suite.name for suite, _ in suites if suite.name in own]
    answers = Answers(outputs={name: [] for name in names}, latencies={name: [] for name in names},
                      prompts={name: [] for name in names}, tokens={name: 0 for name in names},
                      reused={name: 0 for name in names}, reused_from={name: set() for name in names})
    for c, (suite, _index) in enumerate(owners):
        if suite.name not in own:
            continue
        if c in fresh:
            output, latency, count = fresh[c]
            answers.tokens[suite.name] += count
        else:
            row = reuse[digests[c]]
            output, latency = row["outputs"], row.get("latency_ms")
            answers.reused_from[suite.name].add(row["report"])
            answers.reused[suite.name] += 1
        answers.outputs[suite.name].append(output)
        answers.latencies[suite.name].append(latency)
        answers.prompts[suite.name].append(digests[c])
    return answers
