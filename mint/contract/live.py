"""Live suites: a contract suite drawn from the newest ingested data instead of a frozen file.

``suites: - {name: live, data: "dataset:prod@latest"}`` evaluates on the held-out split of dataset
``prod`` (mint.data.datasets.is_heldout: a keyed hash, stable as the data grows, that training never
sees), filtered to the contract's specialist, newest first, capped by the suite's ``limit``. ``@latest``
resolves when the suite is read, and the report records the dataset, the resolved version and the
episode ids, so it can be made again. Each episode becomes one record of the harness's suite format:
the conversation before its last answer is the request; the answer (or its correction) is the
reference when the user did not disown it.
"""
from __future__ import annotations

import hashlib
import json

from mint.contract.schema import Contract, Suite, read_suite, suite_cap
from mint.errors import BadInput
from mint.harness.base import RecordProblem
from mint.workspace import Workspace

# beyond this many episodes a report keeps their hash and count, not every id
MAX_LISTED_IDS = 500


def _answer(episode: dict) -> tuple[list[dict], dict | None] | None:
    """(messages before the last assistant turn, that turn) or None without a user turn before it."""
    messages = [m for m in episode.get("messages") or [] if isinstance(m, dict)]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    prompt = messages if last is None else messages[:last]
    if not any(m.get("role") == "user" for m in prompt):
        return None
    return prompt, (messages[last] if last is not None else None)


def episode_record(harness_name: str, episode: dict) -> dict | None:
    """The suite record an episode makes for ``harness_name``, or None when it cannot make one."""
    split = _answer(episode)
    if split is None:
        return None
    prompt, answer = split
    feedback = episode.get("feedback") or {}
    correction = feedback.get("correction")
    endorsed = answer is not None and (feedback.get("rating") or 0) >= 0
    record = {"id": episode["id"], "messages": [{"role": m["role"], "content": m.get("content") or ""}
                                                for m in prompt if m.get("role") in ("system", "user")]}
    if harness_name == "chat":
        reference = correction or ((answer.get("content") or "") if endorsed else "")
        if reference.strip():
            record["reference"] = reference
    elif harness_name == "genui":
        text = correction or ((answer.get("content") or "") if endorsed else "")
        try:
            tree = json.loads(text) if text.strip() else None
        except ValueError:
            tree = None
        if isinstance(tree, dict):
            record["reference"] = tree
    elif harness_name == "agent":
        calls = (answer or {}).get("tool_calls") if endorsed and not correction else None
        if not calls:
            return None     # an agent record is scored against the calls it should make
        record["tools"] = episode.get("tools") or []
        record["ground_truth"] = [{c["function"]["name"]: {k: [v] for k, v in
                                                          (c["function"].get("arguments") or {}).items()}}
                                  for c in calls]
    else:
        return None
    return record


def read_live_suite(ws: Workspace, contract: Contract, suite: Suite, limit: int | None = None
                    ) -> tuple[list[dict], dict]:
    """(records, provenance): the held-out episodes of the contract's specialist as of the suite's version,
    newest first, up to the smaller of the suite's limit and ``limit``. Every problem is BadInput at the
    suite's line in the contract."""
    from mint.data.datasets import HELDOUT_FRACTION, chain, iter_episodes, resolve_version

    def refuse(message: str) -> BadInput:
        return contract.doc.error(suite.where, message) if contract.doc is not None else \
            BadInput(message, file=str(contract.path), field=suite.where)

    try:
        directory, manifest = resolve_version(ws, suite.dataset, suite.version)
    except BadInput as exc:
        raise refuse(exc.message) from None
    version = manifest["version"]
    harness = contract.harness()
    episodes = list(iter_episodes(ws, suite.dataset, version, contract.specialist, split="heldout"))
    cap = suite_cap(contract, suite, limit)
    records = []
    for episode in reversed(episodes):          # newest first
        record = episode_record(contract.harness_name, episode)
        if record is None:
            continue
        try:
            harness.check_record(record)
        except RecordProblem:
            continue
        records.append(record)
        if cap is not None and len(records) >= cap:
            break
    if not records:
        raise refuse(f"the held-out split ({HELDOUT_FRACTION:.0%}) of dataset {suite.dataset!r} at {version[:12]} "
                     f"has no {contract.specialist} episodes the {contract.harness_name} harness can score "
                     f"({len(episodes)} held out); ingest more logs or use a suite file")
    ids = [r["id"] for r in records]
    provenance = {"dataset": suite.dataset, "requested": suite.version, "version": version,
                  "number": len(chain(directory, version)), "heldout_fraction": HELDOUT_FRACTION,
                  "count": len(ids), "episodes_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
                  "episodes": ids if len(ids) <= MAX_LISTED_IDS else None}
    return records, provenance


def read_suites(ws: Workspace, contract: Contract, limit: int | None = None) -> tuple[list, dict]:
    """Every suite's records as (suite, records) pairs, and the provenance of each live one by name."""
    suites, live = [], {}
    for suite in contract.suites:
        if suite.live:
            records, live[suite.name] = read_live_suite(ws, contract, suite, limit)
        else:
            records = read_suite(contract, suite, limit)
        suites.append((suite, records))
    return suites, live
