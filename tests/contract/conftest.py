"""Shared pieces of the contract tests: a GenUI suite, and a test judge served in-process (FactJudge)."""
from __future__ import annotations

import json
import re

import pytest
from fastapi import Request   # at module level: FastAPI resolves the fake's (postponed) annotations here


def card_contract(tmp_path, text: str):
    """A contract (``text``) over a three-card GenUI suite written beside it; its path."""
    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(3)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "ui.yaml"
    path.write_text(text)
    return path


KEY_ENV, KEY = "MINT_TEST_JUDGE_KEY", "sk-test-judge-0001"
STOP = {"a", "an", "the", "of", "and", "or", "to", "in", "is", "it", "for", "with", "by", "on", "at", "my", "your"}


def section(text: str, name: str) -> str | None:
    found = re.search(rf"<<<{name}>>>\n(.*?)\n<<<END {name}>>>", text, re.S)
    return found.group(1) if found else None


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower())) - STOP


class FactJudge:
    """An OpenAI-compatible judge: ``mode`` "facts" prefers the answer with more of the reference's facts (its
    words that the conversation does not already say; a tie when both hold as many) and rates one answer by the
    share of them it holds, from the scale's lowest to its highest; "first" always prefers answer A and rates
    every answer highest. After ``fail_after`` calls it answers 503s; ``garbage`` makes it answer no verdict, and
    ``rating_reply`` (text) is its reply to every request for a rating."""

    def __init__(self) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        from mint.serve.server import start_background

        self.mode, self.fail_after, self.garbage = "facts", None, False
        self.rating_reply: str | None = None
        self.asked: list[list[dict]] = []
        self.keys: set = set()
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request):
            body = await request.json()
            self.keys.add(request.headers.get("authorization"))
            if self.fail_after is not None and len(self.asked) >= self.fail_after:
                return JSONResponse({"error": {"message": "the judge is overloaded"}}, 503)
            self.asked.append(body["messages"])
            if self.garbage:
                reply = "I think both are fine."
            elif section(body["messages"][-1]["content"], "ANSWER") is not None:
                reply = self.rating_reply if self.rating_reply is not None else json.dumps({"score": self.score(body)})
            else:
                reply = json.dumps({"verdict": self.verdict(body)})
            return {"choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": reply}}]}

        self.running = start_background(app, start_limit_s=60)
        self.url = f"http://127.0.0.1:{self.running.port}/v1"

    def verdict(self, body: dict) -> str:
        if self.mode == "first":
            return "A"
        prompt = body["messages"][-1]["content"]
        # echoing the request ("The capital of France is ...") states no fact
        facts = words(section(prompt, "REFERENCE ANSWER") or "") - words(section(prompt, "CONVERSATION") or "")
        first = len(facts & words(section(prompt, "ANSWER A") or ""))
        second = len(facts & words(section(prompt, "ANSWER B") or ""))
        return "A" if first > second else "B" if second > first else "tie"

    def score(self, body: dict) -> int:
        low, high = map(int, re.search(r"from (-?\d+) \(worst\) to (-?\d+) \(best\)",
                                       body["messages"][0]["content"]).groups())
        if self.mode == "first":
            return high
        prompt = body["messages"][-1]["content"]
        facts = words(section(prompt, "REFERENCE ANSWER") or "") - words(section(prompt, "CONVERSATION") or "")
        found = len(facts & words(section(prompt, "ANSWER") or ""))
        return low + round((high - low) * found / len(facts)) if facts else (low + high) // 2


@pytest.fixture(scope="module")
def judge_server():
    fake = FactJudge()
    yield fake
    fake.running.stop()


@pytest.fixture
def judge(judge_server, monkeypatch):
    """The test judge, reset: preferring facts, up, answering verdicts; its key in KEY_ENV; no waits between tries."""
    from mint.contract import judge as judge_module

    judge_server.mode, judge_server.fail_after, judge_server.garbage = "facts", None, False
    judge_server.rating_reply = None
    judge_server.asked.clear()
    judge_server.keys.clear()
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setattr(judge_module, "RETRY_WAITS_S", (0.0, 0.0))
    return judge_server
