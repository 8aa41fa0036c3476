"""A contract's ``judge:`` block: a model that compares a candidate's answer with its baseline's where no program
can check them (docs/contracts.md, "A model judge").

```yaml
judge:
  endpoint: {url: "http://127.0.0.1:8001/v1", model: Qwen/Qwen2.5-7B-Instruct, api_key_env: JUDGE_API_KEY}
  rubric: "Prefer the answer that is correct, ..."
  decoding: {max_tokens: 256, temperature: 0.0}
  calibration: judges/chat-calibration.jsonl
  floor: {agreement: 0.8, flips: 0.1}
  score: {scale: [1, 10]}       # optional: the judge also rates each answer alone (a suite's judge_score)
```

``endpoint`` is ``local`` (the evaluation's own base decodes the judge prompt greedily on mint's engine) or an
OpenAI-compatible server: its URL, the model it serves, and the name of the environment variable holding its
API key (read when an evaluation runs, never written anywhere). The calibration file holds pairs of answers to
one request whose better one is known; the judge must agree with them and keep its verdict when the order of the
answers is swapped before its verdicts count. This module only declares and checks the block (every problem a
BadInput at ``file:line: field``); mint.contract.judge asks the judge.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from mint.errors import BadInput
from mint.yamlfile import YamlDoc, check_keys, check_number, check_string, is_file

JUDGE_KEYS = ("endpoint", "rubric", "decoding", "calibration", "floor", "score")
SCORE_KEYS = ("scale",)
ENDPOINT_KEYS = ("url", "model", "api_key_env", "timeout_s")
JUDGE_DECODING_KEYS = ("max_tokens", "temperature")
FLOOR_KEYS = ("agreement", "flips")
CALIBRATION_KEYS = ("id", "messages", "request", "reference", "better", "worse", "why")
LOCAL = "local"                 # the evaluation's own base, on mint's engine
OPENAI = "openai"               # an OpenAI-compatible server
DEFAULT_FLOOR = {"agreement": 0.8, "flips": 0.1}
DEFAULT_TIMEOUT_S = 60.0
# the judge's metrics, per suite: the candidate's share of examples won against its baseline's answer (a win 1,
# a tie 0.5, a loss 0), and the share of judged pairs whose verdict changed when the answers swapped places
# (both from comparing two answers); and, where the contract declares a scale, the mean of the judge's rating of
# each answer alone (mint.contract.judge_scores)
WIN_RATE, FLIP_RATE, SCORE = "judge_win_rate", "judge_flip_rate", "judge_score"
COMPARISON_METRICS = (WIN_RATE, FLIP_RATE)
JUDGE_METRICS = (WIN_RATE, FLIP_RATE, SCORE)
# the pairwise metric, gated like a pass/fail one: a sign test on the examples won or lost (mint.contract.paired)
PAIRWISE_METRICS = (WIN_RATE,)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# how mint asks a judge (mint.contract.judge's prompt and verdict format): bump when it changes, so verdicts asked
# one way are neither cached for nor gated beside verdicts asked the other (it is in the contract's hash)
PROMPT_VERSION = 1


@dataclass(frozen=True)
class JudgeEndpoint:
    """Where the judge runs: ``kind`` LOCAL (mint's engine on the evaluation's base) or OPENAI (``url``,
    ``model``, the key in the environment variable ``api_key_env``, ``timeout_s`` per call)."""
    kind: str
    url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class CalibrationPair:
    """One line of the calibration file: a conversation, two answers to it and which one is better."""
    line: int
    messages: tuple[dict, ...]
    better: str
    worse: str
    reference: str | None = None
    why: str | None = None          # how the worse answer was made worse (truncated, off-topic, ...), for people


@dataclass(frozen=True)
class JudgeSpec:
    endpoint: JudgeEndpoint
    rubric: str
    max_tokens: int
    temperature: float
    calibration: Path
    pairs: tuple[CalibrationPair, ...] = field(repr=False)
    agreement_floor: float = DEFAULT_FLOOR["agreement"]
    flip_floor: float = DEFAULT_FLOOR["flips"]
    scale: tuple[int, int] | None = None    # the lowest and highest rating of ``score:``; None: no ratings
    file: str = ""                  # the contract, and the lines of the fields an evaluation's errors name
    lines: dict = field(default_factory=dict, compare=False, repr=False)

    def identity(self) -> dict:
        """What decides the judge's verdicts, as the contract's hash and the call cache key it: the kind of
        endpoint and the model (not its URL, whose host or credentials say nothing of the verdicts, nor its
        key), the rubric, the decoding and how mint words its prompt. The calibration file is hashed by its bytes
        beside it. (A rating's scale is in the contract's YAML, and in the words of every rating prompt.)"""
        return {"kind": self.endpoint.kind, "model": self.endpoint.model, "rubric": self.rubric,
                "max_tokens": self.max_tokens, "temperature": self.temperature, "prompt": PROMPT_VERSION}

    def metrics(self) -> tuple[str, ...]:
        """What this judge measures: the comparison's metrics, and the rating where a scale is declared."""
        return COMPARISON_METRICS + ((SCORE,) if self.scale else ())

    def error(self, name: str, message: str) -> BadInput:
        """BadInput at the contract's line of ``judge.NAME`` (an evaluation's error: a key not set, a judge down)."""
        return BadInput(message, file=self.file or None, line=self.lines.get(name), field=f"judge.{name}")


def load_judge(doc: YamlDoc, raw, path: Path) -> JudgeSpec:
    """The ``judge:`` block of the contract ``path``; every problem BadInput at its line."""
    block = check_keys(doc, raw, "judge", JUDGE_KEYS)
    for key in ("endpoint", "rubric", "calibration"):
        if key not in block:
            raise doc.error("judge", f"missing required field `{key}`")
    endpoint = _endpoint(doc, block["endpoint"])
    rubric = block["rubric"]
    if not isinstance(rubric, str) or not rubric.strip():
        raise doc.error("judge.rubric", "expected the rubric's text (a non-empty string)")
    decoding = check_keys(doc, block.get("decoding") or {}, "judge.decoding", JUDGE_DECODING_KEYS)
    max_tokens = check_number(doc, decoding.get("max_tokens", 256), "judge.decoding.max_tokens", minimum=8,
                              integer=True)
    temperature = check_number(doc, decoding.get("temperature", 0.0), "judge.decoding.temperature", minimum=0)
    floor = check_keys(doc, block.get("floor") or {}, "judge.floor", FLOOR_KEYS)
    agreement = check_number(doc, floor.get("agreement", DEFAULT_FLOOR["agreement"]), "judge.floor.agreement",
                             minimum=0, maximum=1)
    flips = check_number(doc, floor.get("flips", DEFAULT_FLOOR["flips"]), "judge.floor.flips", minimum=0, maximum=1)
    calibration = (path.parent / check_string(doc, block["calibration"], "judge.calibration")).resolve()
    if not is_file(calibration):
        raise doc.error("judge.calibration", f"no such file: {calibration}")
    scale = _scale(doc, block["score"]) if "score" in block else None
    lines = {name: doc.line(f"judge.{name}") for name in ("endpoint", "endpoint.url", "endpoint.api_key_env")}
    return JudgeSpec(endpoint, rubric, int(max_tokens), float(temperature), calibration,
                     read_calibration(calibration), float(agreement), float(flips), scale, str(doc.path), lines)


def _scale(doc: YamlDoc, raw) -> tuple[int, int]:
    """``score: {scale: [LOW, HIGH]}``: two whole numbers, the lowest rating first."""
    block = check_keys(doc, raw, "judge.score", SCORE_KEYS)
    if "scale" not in block:
        raise doc.error("judge.score", "missing required field `scale` (the lowest and highest rating, e.g. [1, 10])")
    scale = block["scale"]
    if not isinstance(scale, list) or len(scale) != 2 or not all(
            isinstance(end, int) and not isinstance(end, bool) for end in scale):
        raise doc.error("judge.score.scale", f"expected [LOW, HIGH], two whole numbers such as [1, 10], got {scale!r}")
    if scale[0] >= scale[1]:
        raise doc.error("judge.score.scale", f"the lowest rating comes first and is below the highest, got {scale!r}")
    return int(scale[0]), int(scale[1])


def _endpoint(doc: YamlDoc, raw) -> JudgeEndpoint:
    if raw == LOCAL:
        return JudgeEndpoint(LOCAL)
    if not isinstance(raw, dict):
        raise doc.error("judge.endpoint", f"expected `{LOCAL}` (the evaluation's base on mint's engine) or a "
                                          "mapping with url, model and api_key_env (an OpenAI-compatible server)")
    block = check_keys(doc, raw, "judge.endpoint", ENDPOINT_KEYS)
    for required in ("url", "model"):
        if required not in block:
            raise doc.error("judge.endpoint", f"missing required field `{required}`")
    url = check_string(doc, block["url"], "judge.endpoint.url")
    if not re.match(r"^https?://[^/\s]+", url):
        raise doc.error("judge.endpoint.url", f"{url!r} is not an http(s) URL")
    model = check_string(doc, block["model"], "judge.endpoint.model")
    key = block.get("api_key_env")
    if key is not None and (not isinstance(key, str) or not _ENV_NAME.match(key)):
        raise doc.error("judge.endpoint.api_key_env", "expected the name of an environment variable (the key "
                                                      "itself never goes in a contract)")
    timeout = check_number(doc, block.get("timeout_s", DEFAULT_TIMEOUT_S), "judge.endpoint.timeout_s", minimum=0,
                           exclusive=True)
    return JudgeEndpoint(OPENAI, url, model, key, float(timeout))


def read_calibration(path: Path) -> tuple[CalibrationPair, ...]:
    """The calibration file's pairs: JSONL, one object a line with ``messages`` (a conversation) or ``request``
    (the user's text), ``better`` and ``worse`` (two different answers), optional ``reference`` (shown to the
    judge, as a suite's reference is), ``why`` and ``id``. A bad line is BadInput at ``file:line: field``."""
    pairs = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read: {exc}", file=str(path)) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            pairs.append(_pair(path, number, line))
    if not pairs:
        raise BadInput("the calibration file has no pairs", file=str(path))
    return tuple(pairs)


def _pair(path: Path, number: int, line: str) -> CalibrationPair:
    def bad(name: str, message: str) -> BadInput:
        return BadInput(message, file=str(path), line=number, field=name)

    try:
        row = json.loads(line)
    except ValueError as exc:
        raise bad("", f"invalid JSON: {exc}") from None
    if not isinstance(row, dict):
        raise bad("", "expected an object with messages (or request), better and worse")
    unknown = [key for key in row if key not in CALIBRATION_KEYS]
    if unknown:
        raise bad(unknown[0], f"unknown key (expected one of {', '.join(CALIBRATION_KEYS)})")
    if ("messages" in row) == ("request" in row):
        raise bad("messages", "expected either `messages` (a conversation) or `request` (the user's text)")
    if "request" in row:
        if not isinstance(row["request"], str) or not row["request"].strip():
            raise bad("request", "expected the user's text (a non-empty string)")
        messages: tuple[dict, ...] = ({"role": "user", "content": row["request"]},)
    else:
        raw = row["messages"]
        if not isinstance(raw, list) or not raw or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in raw):
            raise bad("messages", "expected a non-empty list of {role, content} messages")
        messages = tuple({"role": m["role"], "content": m["content"]} for m in raw)
    for key in ("better", "worse"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise bad(key, "expected an answer (a non-empty string)")
    if row["better"].strip() == row["worse"].strip():
        raise bad("worse", "is the same answer as `better`")
    for key in ("reference", "why"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise bad(key, "expected a string")
    return CalibrationPair(number, messages, row["better"], row["worse"], row.get("reference"), row.get("why"))


def public_url(url: str) -> str:
    """``url`` without what may be secret in it: user and password, query and fragment."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def judge_summary(judge: JudgeSpec) -> dict:
    """What ``mint contract check`` says of a judge: where it runs, its calibration set and floor."""
    endpoint = judge.endpoint
    return {"endpoint": LOCAL if endpoint.kind == LOCAL else {"model": endpoint.model, "url": public_url(endpoint.url or ""),
                                                              "api_key_env": endpoint.api_key_env},
            "calibration": str(judge.calibration), "pairs": len(judge.pairs),
            "floor": {"agreement": judge.agreement_floor, "flips": judge.flip_floor},
            **({"score": {"scale": list(judge.scale)}} if judge.scale else {})}


def judge_warnings(judge: JudgeSpec, metrics: list[str]) -> list[str]:
    """What may stop or weaken a judged evaluation, said before one runs (``metrics``: what the suites measure)."""
    import os

    warnings = []
    measured = {m.partition(".")[2] for m in metrics}
    if not measured & set(JUDGE_METRICS):
        warnings.append(f"judge: no suite measures {', '.join(judge.metrics())}, so the judge is never asked")
    elif judge.scale and SCORE not in measured:
        warnings.append("judge.score: no suite measures judge_score, so no answer is rated")
    env = judge.endpoint.api_key_env
    if env and not os.environ.get(env):
        warnings.append(f"judge.endpoint.api_key_env: {env} is not set here; `mint eval` needs it")
    if len(judge.pairs) < 20:
        warnings.append(f"judge.calibration: {len(judge.pairs)} pairs measure agreement coarsely; 20 or more "
                        "tell a judge at the floor from one below it more often")
    return warnings


def judge_hash_lines(judge: JudgeSpec) -> list[bytes]:
    """What a judged contract's hash covers beside its YAML: the judge's identity and its calibration file."""
    identity = json.dumps(judge.identity(), sort_keys=True)
    calibration = hashlib.sha256(judge.calibration.read_bytes()).hexdigest()
    return [f"judge\0{identity}\n".encode(), f"judge calibration\0{calibration}\n".encode()]
