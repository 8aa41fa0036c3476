"""Reliability suite 3: fuzz every input mint reads from outside, count the crashes.

Run:   python scripts/reliability_fuzz.py            (10,000+ cases, a few minutes on 2 cores)
       python scripts/reliability_fuzz.py --quick    (a few hundred cases)
       python scripts/reliability_fuzz.py --seed 7   (another reproducible draw)

Targets, each driven the way a user reaches it:
  logs      `ingest` (library) on every reader format (JSON Lines plain/.gz/.bz2/.xz/UTF-16, JSON arrays,
            concatenated JSON, Parquet; OpenAI, ShareGPT and mint-log records) after byte-level damage:
            truncation, bit flips, invalid UTF-8, NUL bytes, huge lines, deep nesting. Every record must be
            counted (read = kept + duplicate + quarantined); only BadInput naming the file may escape.
  contract  `mint contract check FILE` (in-process) on structurally and textually mutated contracts
  recipe    `mint recipe check FILE`
  router    the router contract, an ordinary contract (mint.contract.schema.load_contract)
  project   mint.yaml, through `mint ingest --config mint.yaml`
  set       `mint train --dry-run --method M --set KEY=VALUE`
  serve     POST bodies of /v1/chat/completions and /v1/feedback (FastAPI TestClient, tiny base)
A crash is an uncaught exception, exit code 3, a traceback in the output, a 5xx, a case running past
CASE_LIMIT_S, or an exit 2 whose message does not name the file (or, for --set, the key) at fault.
The last line printed is the figure; the exit code is 1 when crashes > 0 or fewer cases ran than asked.
"""
from __future__ import annotations

import argparse
import bz2
import contextlib
import copy
import gzip
import io
import json
import lzma
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CASE_LIMIT_S = 60          # one case past this is a hang, counted as a crash (generous: a loaded 2-core box)
# share of the cases per target (the long form asks for 10,000+ in all)
WEIGHTS = {"logs": 0.30, "contract": 0.14, "recipe": 0.14, "router": 0.08, "project": 0.10, "set": 0.12,
           "serve": 0.12}
SCAFFOLD = ROOT / "mint" / "scaffold"

# --- generic values and byte damage ------------------------------------------------------------

_scalar = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12) | st.sampled_from(["", "-1", "1e-4", "0", "null", "~", "chat", "coding",
                                                      "../x", "heldout.accuracy", "a" * 300]))
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=3), max_leaves=8)


def _damage(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    """Apply byte-level damage: each op is (kind, position seed, size seed)."""
    out = bytearray(data)
    for kind, where, size in ops:
        at = where % (len(out) + 1)
        if kind == "truncate":
            del out[at:]
        elif kind == "flip" and out:
            out[at % len(out)] ^= 1 << (size % 8)
        elif kind == "bad_utf8":
            out[at:at] = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\xc0\xaf"][size % 5]
        elif kind == "nul":
            out[at:at] = b"\x00" * (1 + size % 4)
        elif kind == "huge":   # a line past ingest's 1 MB record cap
            out[at:at] = b'{"messages": [{"role": "user", "content": "' + b"x" * 1_100_000 + b'"}]}\n'
        elif kind == "deep":
            depth = [50, 3_000, 60_000][size % 3]
            out[at:at] = b"[" * depth + b"]" * (depth if size % 2 else 0)
        elif kind == "newline":
            out[at:at] = b"\n"
        elif kind == "dup" and out:
            out[at:at] = out[at:at + 1 + size % 64]
    return bytes(out)


# a huge line costs a megabyte per case, so it is drawn a quarter as often as the others
_ops = st.lists(st.tuples(st.sampled_from(["truncate", "flip", "bad_utf8", "nul", "deep", "newline", "dup"] * 4
                                          + ["huge"]),
                          st.integers(0, 1 << 30), st.integers(0, 255)), max_size=3)


# --- target: log readers and ingest ------------------------------------------------------------

_RECORDS = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Reverse a list in Python"},
                  {"role": "assistant", "content": "xs[::-1]"}], "feedback": {"rating": 1}},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                      "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                  {"role": "assistant", "content": "Sunny."}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]},
    {"conversations": [{"from": "human", "value": "Tell me a joke, mail me at a@b.com"},
                       {"from": "gpt", "value": "Why did the chicken..."}]},
    {"id": "chatcmpl-1", "session": "s-1", "ts": "2026-11-29T10:00:00Z", "specialist": "genui",
     "messages": [{"role": "user", "content": "A signup form"}, {"role": "assistant", "content": "<Form/>"}],
     "feedback": {"rating": -1, "correction": "Use <Form fields=...>"}, "served_by": "genui:v2",
     "route": {"probabilities": {"genui": 1.0}, "decided_by": "rules", "revision": None}, "latency_ms": 3.1},
    {"id": "chatcmpl-1", "rating": 1},
]
_CONTAINERS = ["jsonl", "jsonl.gz", "jsonl.bz2", "jsonl.xz", "jsonl-utf16", "json", "json-concat", "parquet"]


@st.composite
def log_files(draw):
    records = draw(st.lists(st.sampled_from(_RECORDS) | _value, min_size=0, max_size=6))
    container = draw(st.sampled_from(_CONTAINERS))
    damage_after_compression = draw(st.booleans())
    return records, container, draw(_ops), damage_after_compression


def _log_bytes(records, container: str, ops, after: bool) -> tuple[str, bytes]:
    """(file name, bytes) of ``records`` in ``container``, damaged before or after compression."""
    if container == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = io.BytesIO()
        rows = [r for r in records if isinstance(r, dict) and r] or [{"x": 1}]
        try:
            table = pa.Table.from_pylist([{"json": json.dumps(r), **({"messages": r["messages"]} if "messages" in r
                                                                    and isinstance(r["messages"], list) else {})}
                                          for r in rows])
        except (pa.ArrowException, TypeError, ValueError):   # a mix Arrow cannot type: keep the text column
            table = pa.Table.from_pylist([{"json": json.dumps(r)} for r in rows])
        pq.write_table(table, sink)
        return "logs.parquet", _damage(sink.getvalue(), ops)
    if container.startswith("json") and container not in ("json", "json-concat"):
        plain = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    elif container == "json":
        plain = json.dumps(records, indent=1).encode()
    else:
        plain = b"\n".join(json.dumps(r, indent=None if i % 2 else 2).encode() for i, r in enumerate(records))
    if not after:
        plain = _damage(plain, ops)
    name, data = {"jsonl": ("logs.jsonl", lambda b: b), "jsonl.gz": ("logs.jsonl.gz", gzip.compress),
                  "jsonl.bz2": ("logs.jsonl.bz2", bz2.compress), "jsonl.xz": ("logs.jsonl.xz", lzma.compress),
                  "jsonl-utf16": ("logs.jsonl", lambda b: b"\xff\xfe" + b.decode("utf-8", "replace").encode(
                      "utf-16-le", "surrogatepass")),
                  "json": ("logs.json", lambda b: b), "json-concat": ("logs.json", lambda b: b)}[container]
    out = data(plain)
    return name, _damage(out, ops) if after else out


def check_logs(case, tmp: Path) -> str | None:
    from mint.data.ingest import ingest
    from mint.errors import BadInput
    from mint.project import DEFAULT_PROJECT
    from mint.workspace import workspace

    records, container, ops, after = case
    name, data = _log_bytes(records, container, ops, after)
    path = tmp / name
    path.write_bytes(data)
    try:
        result = ingest(workspace(tmp / "home"), [path], dataset="fuzz", project=DEFAULT_PROJECT, workers=0)
    except BadInput as exc:
        return None if str(path) in str(exc) else f"BadInput without the file: {exc}"
    stats = result.sources[0]
    if stats.read != stats.kept + stats.duplicate + stats.quarantined:
        return f"records uncounted: read {stats.read} != kept {stats.kept} + dup {stats.duplicate} + " \
               f"quarantined {stats.quarantined}"
    return None


# --- YAML documents: contracts, recipes, router contract, mint.yaml ---------------------------------

def _paths(value, prefix=()):
    """Every (path, value) inside a YAML document."""
    yield prefix, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, prefix + (i,))


@st.composite
def mutated_yaml(draw, documents: list[dict]):
    """A YAML text: a scaffold document with values replaced, removed or added, then maybe byte damage."""
    import yaml

    doc = copy.deepcopy(draw(st.sampled_from(documents)))
    for _ in range(draw(st.integers(0, 3))):
        paths = list(_paths(doc))
        path, _old = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "add", "typo"]))
        if not path:
            if action == "replace":
                doc = draw(_value)
            continue
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        last = path[-1]
        if action == "replace":
            parent[last] = draw(_value)
        elif action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10) | st.integers())] = draw(_value)
        elif action == "typo" and isinstance(parent, dict) and isinstance(last, str) and last:
            parent[last[:-1] + draw(st.sampled_from(["", "s", "_", last[-1] * 2]))] = parent.pop(last)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode("utf-8") \
        if draw(st.integers(0, 9)) else draw(st.sampled_from(_YAML_ODDITIES))
    return _damage(text, draw(_ops)) if draw(st.booleans()) else text


_YAML_ODDITIES = [
    b"", b"\x00", b"- a\n- b\n", b"just text", b"{", b"key: [1, 2", b"a: b: c", b"\t- tab", b"!!python/object:os.system x",
    b"a: &a [*a]",   # a recursive alias
    b'a: &a ["x","x"]\nb: &b [*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c]\n'
    b"e: &e [*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f]\nh: [*g,*g,*g,*g,*g,*g]\n",
    b"[" * 5000 + b"]" * 5000, b"a:\n" + b"  - " * 2000 + b"x", b"\xef\xbb\xbfcontract: x\n", b"\xff\xfe",
    b"version: 99999999999999999999999999\n", b"? [a, b]\n: c\n", b"contract: !!binary aGVsbG8=\n",
]


def _yaml_docs(folder: Path, names: list[str]) -> list[dict]:
    import yaml
    return [yaml.safe_load((folder / name).read_text()) for name in names]


def run_cli(args: list[str]) -> tuple[int, str]:
    """``mint ARGS`` in this process: (exit code, stdout + stderr); an escaping exception is returned as 99."""
    from mint.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:   # noqa: PERF203 - typer may exit directly
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - an escaping exception is the crash we count
            if isinstance(exc, _Hang):
                raise
            return 99, f"uncaught {type(exc).__name__}: {exc}"
    return code, out.getvalue() + err.getvalue()


def cli_verdict(code: int, output: str, must_name: str) -> str | None:
    """None when the CLI answered as promised; else what went wrong."""
    flat = " ".join(output.split())
    if code in (3, 99) or "Traceback" in output:
        return f"exit {code}: {flat[-400:]}"
    if code == 2 and must_name not in flat.replace(" ", "") and must_name not in flat:
        return f"exit 2 without naming {must_name}: {flat[-300:]}"
    if code not in (0, 1, 2):
        return f"unexpected exit {code}: {flat[-300:]}"
    return None


class Project:
    """A scratch project made by `mint init` once; each case writes its file into it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        code, output = run_cli(["init", "--dir", str(root)])
        assert code == 0, output
        self.one_log = root / "one.jsonl"   # what `mint ingest --config FUZZED` reads: one short episode
        self.one_log.write_text(json.dumps({"messages": [{"role": "user", "content": "Reverse a list"},
                                                         {"role": "assistant", "content": "xs[::-1]"}]}) + "\n")


def check_contract(text: bytes, project: Project) -> str | None:
    path = project.root / "contracts" / "fuzzed.yaml"
    path.write_bytes(text)
    return cli_verdict(*run_cli(["contract", "check", str(path)]), "fuzzed.yaml")


def check_recipe(text: bytes, project: Project) -> str | None:
    path = project.root / "recipes" / "fuzzed.yaml"
    path.write_bytes(text)
    return cli_verdict(*run_cli(["recipe", "check", str(path)]), "fuzzed.yaml")


def check_router(text: bytes, project: Project) -> str | None:
    from mint.contract.schema import load_contract
    from mint.errors import BadInput

    path = project.root / "contracts" / "router-fuzzed.yaml"
    path.write_bytes(text)
    try:
        load_contract(path)
    except BadInput as exc:
        return None if "router-fuzzed.yaml" in str(exc) else f"BadInput without the file: {exc}"
    return None


def check_project(text: bytes, project: Project) -> str | None:
    path = project.root / "fuzzed-mint.yaml"
    path.write_bytes(text)
    home = project.root / "home-project"
    code, output = run_cli(["--home", str(home), "ingest", str(project.one_log),
                            "--config", str(path), "--dataset", "p", "--json"])
    problem = cli_verdict(code, output, "fuzzed-mint.yaml")
    if problem is None and code == 2 and (home / "datasets" / "p" / "HEAD").exists():
        problem = "refused with exit 2 but a dataset version was written"
    shutil.rmtree(home, ignore_errors=True)
    return problem


_SET_KEYS = ["max_steps", "learning_rate", "lora.r", "lora.alpha", "lora.dropout", "lora.target_modules",
             "trl.per_device_train_batch_size", "trl.beta", "trl.num_generations", "lora.nope", "trl.output_dir",
             "bf16", "seed", "max_length", "gradient_accumulation_steps", "lr_scheduler_type", "report_to",
             "", ".", "trl.", "a.b.c", "trl.max_steps"]


@st.composite
def set_values(draw):
    sets = []
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(_SET_KEYS) | st.text(max_size=10))
        value = draw(st.text(max_size=16) | st.sampled_from(["-1", "0", "1e-4", "nan", "inf", "1e999", "[1, 2]",
                                                             "{a: 1}", "[", "true", "null", "99999999999999999999",
                                                             "&a [*a]", "!!binary aGk=", "- x", "'"]))
        sets.append(draw(st.sampled_from([f"{key}={value}", key, f"={value}", f"{key}=={value}"])))
    return draw(st.sampled_from(["sft", "dpo", "kto", "grpo"])), sets


def _visible(text: str) -> str:
    return "".join(c for c in text if c.isprintable() and not c.isspace())


def check_set(case, project: Project) -> str | None:
    method, sets = case
    args = ["train", "--dry-run", "--method", method]
    for item in sets:
        args += ["--set", item]
    code, output = run_cli(args)
    flat = " ".join(output.split())
    # the terminal shows a key with its odd spaces normalised, and mint escapes a key it would not show
    # (ascii()): the key is looked for as it is seen, or escaped
    seen = _visible(output)

    def named(key: str) -> bool:
        return (bool(_visible(key)) and _visible(key) in seen) or _visible(ascii(key)) in seen
    if code == 2 and "--set" not in flat and not any(named(item.partition("=")[0].strip().split(".")[-1])
                                                     for item in sets):
        return f"exit 2 without naming the --set key: {flat[-300:]}"
    return cli_verdict(code, output, "")


# --- target: the serve endpoint's request bodies -------------------------------------------------

_message = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "x"]) | _scalar,
    "content": st.text(max_size=40) | st.lists(st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["text", "image_url"]) | _scalar, "text": st.text(max_size=20) | _scalar}),
        max_size=3) | _value,
    "name": _scalar, "tool_calls": _value})
_chat_body = st.fixed_dictionaries({}, optional={
    "model": st.sampled_from(["mint", "mint/coding", "mint/chat", "mint/none", "gpt-4", "mint/"]) | _scalar,
    "messages": st.lists(_message, max_size=4) | _value,
    "max_tokens": st.integers(1, 8) | _scalar, "max_completion_tokens": st.integers(1, 8) | _scalar,
    "temperature": _scalar | st.floats(0, 2), "top_p": _scalar | st.floats(0, 1), "seed": _scalar,
    "n": _scalar, "stream": _scalar, "tools": _value, "user": _scalar, "stop": _value})


@st.composite
def serve_requests(draw):
    endpoint = draw(st.sampled_from(["/v1/chat/completions"] * 4 + ["/v1/feedback"]))
    kind = draw(st.sampled_from(["object", "object", "object", "json", "bytes", "damaged", "deep"]))
    if kind == "object":
        body = json.dumps(draw(_chat_body) if endpoint.endswith("completions") else draw(st.fixed_dictionaries(
            {}, optional={"id": _scalar, "rating": _scalar, "correction": _value}))).encode()
    elif kind == "json":
        body = json.dumps(draw(_value)).encode()
    elif kind == "bytes":
        body = draw(st.binary(max_size=64))
    elif kind == "damaged":
        body = _damage(json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode(),
                       draw(_ops))
    else:
        depth = draw(st.sampled_from([100, 5_000, 100_000]))
        body = b'{"messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * depth + b"]" * depth + b"}"
    return endpoint, body


class Server:
    """The app of `mint serve` on the tiny base, in this process (TestClient runs its lifespan)."""

    def __init__(self, home: Path) -> None:
        from fastapi.testclient import TestClient

        from mint.mol.mixture import Mixture
        from mint.mol.serve import create_app
        from mint.project import DEFAULT_PROJECT
        from mint.project import Project as MintProject
        from mint.workspace import workspace

        project = MintProject(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)
        self.app = create_app(Mixture.open(workspace(home), project), window_ms=0, poll_s=60)
        self.client = TestClient(self.app, raise_server_exceptions=False, base_url="http://localhost")
        self.client.__enter__()

    def close(self) -> None:
        self.client.__exit__(None, None, None)


def check_serve(case, server: Server) -> str | None:
    endpoint, body = case
    response = server.client.post(endpoint, content=body, headers={"content-type": "application/json"})
    if response.status_code >= 500:
        return f"{response.status_code}: {response.text[:300]}"
    if response.status_code >= 400:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            return f"{response.status_code} without an OpenAI error object: {response.text[:200]}"
        if not message:
            return f"{response.status_code} with an empty message"
    return None


# --- the driver --------------------------------------------------------------------------------------

class _Hang(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Hang()


def run_target(name: str, strategy, check, cases: int, seed: int, crashes: list) -> int:
    """Run ``check`` on ``cases`` generated inputs; every problem is appended to ``crashes``. Returns the count."""
    ran = 0

    @hypothesis_seed(seed)
    @settings(max_examples=cases, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def prop(case):
        nonlocal ran
        ran += 1
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(CASE_LIMIT_S)
        try:
            problem = check(case)
        except _Hang:
            problem = f"ran past {CASE_LIMIT_S} s"
        except Exception as exc:  # noqa: BLE001 - an escaping exception is the crash we count
            problem = f"uncaught {type(exc).__name__}: {str(exc)[:300]}"
        finally:
            signal.alarm(0)
        if problem:
            crashes.append((name, problem, repr(case)[:300]))

    prop()
    return ran


def run_suite(total: int, seed: int, targets: list[str] | None = None, log=print) -> dict:
    """Fuzz the targets with ``total`` cases split by WEIGHTS; returns {cases, crashes, by_target, examples}."""
    targets = targets or list(WEIGHTS)
    scratch = Path(tempfile.mkdtemp(prefix="mint-fuzz-"))
    old_home, old_cwd = os.environ.get("MINT_HOME"), os.getcwd()
    os.environ["MINT_HOME"] = str(scratch / "home")
    crashes: list = []
    by_target: dict[str, int] = {}
    server = None
    # import the heavy modules before any case runs: a case-limit alarm inside a first import of torch
    # would leave it half-imported for every later case
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from mint.mol import serve  # noqa: F401
    from mint.train import config  # noqa: F401
    try:
        project = Project(scratch / "project")
        os.chdir(project.root)
        contracts = _yaml_docs(SCAFFOLD / "contracts", ["coding.yaml", "chat.yaml", "agent.yaml", "genui-smoke.yaml"])
        recipes = _yaml_docs(SCAFFOLD / "recipes", ["smoke.yaml", "nightly.yaml", "kto-thumbs.yaml",
                                                    "grpo-verifier.yaml"])
        router = _yaml_docs(SCAFFOLD / "contracts", ["router.yaml"])
        projects = _yaml_docs(project.root, ["mint.yaml"])
        logs_dir = scratch / "logs"

        def logs_check(case):
            case_dir = logs_dir / f"{by_target.get('logs', 0)}-{random.random():.9f}"
            case_dir.mkdir(parents=True)
            try:
                return check_logs(case, case_dir)
            finally:
                shutil.rmtree(case_dir, ignore_errors=True)

        plan = {
            "logs": (log_files(), logs_check),
            "contract": (mutated_yaml(contracts), lambda c: check_contract(c, project)),
            "recipe": (mutated_yaml(recipes), lambda c: check_recipe(c, project)),
            "router": (mutated_yaml(router), lambda c: check_router(c, project)),
            "project": (mutated_yaml(projects), lambda c: check_project(c, project)),
            "set": (set_values(), lambda c: check_set(c, project)),
        }
        for name in targets:
            cases = max(1, round(total * WEIGHTS[name]))
            started = time.perf_counter()
            if name == "serve":
                server = Server(scratch / "serve-home")
                strategy, check = serve_requests(), (lambda c: check_serve(c, server))
            else:
                strategy, check = plan[name]
            before = len(crashes)
            by_target[name] = run_target(name, strategy, check, cases, seed + list(WEIGHTS).index(name),
                                         crashes)
            log(f"{name:9s} cases={by_target[name]:6d} crashes={len(crashes) - before:4d} "
                f"({time.perf_counter() - started:.1f} s)")
    finally:
        if server is not None:
            server.close()
        os.chdir(old_cwd)
        if old_home is None:
            os.environ.pop("MINT_HOME", None)
        else:
            os.environ["MINT_HOME"] = old_home
        shutil.rmtree(scratch, ignore_errors=True)
    return {"cases": sum(by_target.values()), "crashes": len(crashes), "by_target": by_target,
            "examples": crashes}


def _run_one(job: tuple[int, int, str]) -> dict:
    total, seed, target = job
    from mint.cli.common import quiet_transformers
    quiet_transformers()
    lines: list[str] = []
    result = run_suite(total, seed, [target], log=lines.append)
    result["log"] = lines
    return result


def run_parallel(total: int, seed: int, targets: list[str], jobs: int) -> dict:
    """``run_suite`` with each target in one of ``jobs`` worker processes (the targets share nothing)."""
    import multiprocessing

    merged: dict = {"cases": 0, "crashes": 0, "by_target": {}, "examples": []}
    # costliest first, so the cores finish together
    order = sorted(targets, key=lambda t: -WEIGHTS[t] * (3 if t == "serve" else 1))
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for result in pool.imap_unordered(_run_one, [(total, seed, t) for t in order]):
            for line in result["log"]:
                print(line, flush=True)
            merged["cases"] += result["cases"]
            merged["crashes"] += result["crashes"]
            merged["by_target"].update(result["by_target"])
            merged["examples"] += result["examples"]
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred cases instead of 10,000+")
    parser.add_argument("--cases", type=int, default=None, help="cases in all (default 10,500; --quick 350)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (the same seed, the same cases)")
    parser.add_argument("--only", action="append", choices=list(WEIGHTS), help="fuzz only this target (repeatable)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes, one target each at a time (default: 2 where there are 2 cores)")
    args = parser.parse_args()
    total = args.cases or (350 if args.quick else 10_500)
    started = time.perf_counter()
    targets = args.only or list(WEIGHTS)
    if args.jobs > 1:
        result = run_parallel(total, args.seed, targets, args.jobs)
    else:
        from mint.cli.common import quiet_transformers
        quiet_transformers()
        result = run_suite(total, args.seed, targets)
    for target, problem, case in result["examples"][:20]:
        print(f"CRASH {target}: {problem}\n      case: {case}")
    wanted = sum(max(1, round(total * WEIGHTS[t])) for t in (args.only or WEIGHTS))
    # hypothesis may stop short of max_examples when a space is small; 95% of the ask must still run
    enough = result["cases"] >= 0.95 * wanted
    passed = result["crashes"] == 0 and enough
    print(f"({time.perf_counter() - started:.0f} s)")
    print(f"FIGURE fuzz: cases={result['cases']} crashes={result['crashes']} goal=0 "
          f"{'PASS' if passed else 'FAIL' + ('' if enough else ' (too few cases)')}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
