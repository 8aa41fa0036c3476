"""Inspect AI task: the GenUI specialist through `mint serve`, on the held-out GenUI requests (no download).

Run: a server, then Inspect's OpenAI-compatible provider against it (the provider named `mint` reads
MINT_BASE_URL and MINT_API_KEY, the key `mint serve` takes too):

    mint serve --port 8000 &
    MINT_BASE_URL=http://127.0.0.1:8000/v1 MINT_API_KEY=unused \
        inspect eval examples/evals/genui_inspect.py --model openai-api/mint/mint/genui --limit 12

`mint/genui` asks for the GenUI champion (`mint` routes each request as users' are). Each request asks for
JSON of a UI4A component tree (`response_format: json_schema`, which the server decodes constrained), and the
score is the share of answers whose root component is the kind of the reference tree
(`examples/heldout/genui.jsonl`: a chart asked for is a Chart, a product card a Card); an answer cut at its
token limit is judged by the kind it opens with.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig, ResponseSchema
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate
from inspect_ai.util import JSONSchema

REQUESTS = Path(__file__).resolve().parents[1] / "heldout" / "genui.jsonl"
ROOT = re.compile(r'\{"type": "(\w+)"')
KINDS = ["Card", "Stack", "Text", "Button", "TextField", "Select", "Form", "Table", "List", "Image", "Chart"]
# a component tree's outline (contracts/ui4a/catalog.v1.json has the whole grammar): its kind and its props
TREE = JSONSchema(type="object", properties={"type": JSONSchema(enum=KINDS), "props": JSONSchema(type="object")},
                  required=["type", "props"])


def request_sample(record: dict) -> Sample:
    messages = [ChatMessageSystem(content=m["content"]) if m["role"] == "system" else
                ChatMessageUser(content=m["content"]) for m in record["messages"]]
    return Sample(input=messages, target=record["reference"]["type"])


@scorer(metrics=[accuracy(), stderr()])
def root_kind():
    """CORRECT when the answer is a JSON component tree whose root is the reference's kind."""
    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion
        try:
            tree = json.loads(answer)
            kind, why = tree.get("type") if isinstance(tree, dict) else None, "a whole tree"
        except ValueError:
            # cut at its token limit: the schema it was decoded to makes it open with its root's kind
            opening = ROOT.match(answer) if state.output.stop_reason == "max_tokens" else None
            kind, why = (opening.group(1), "cut at the token limit") if opening else (None, "not JSON")
        return Score(value=CORRECT if kind == target.text else INCORRECT, answer=str(kind), explanation=why)
    return score


@task
def genui_json(max_tokens: int = 160) -> Task:
    return Task(dataset=json_dataset(str(REQUESTS), request_sample), solver=generate(), scorer=root_kind(),
                config=GenerateConfig(temperature=0.0, max_tokens=max_tokens,
                                      response_schema=ResponseSchema(name="ui4a_tree", json_schema=TREE)))
