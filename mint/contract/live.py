"""Live suites: a contract suite drawn from the newest ingested data, or from the served traffic, instead of a
frozen file.

``suites: - {name: live, data: "dataset:prod@latest"}`` evaluates on the held-out split of dataset
``prod`` (mint.data.datasets.is_heldout: a keyed hash, stable as the data grows, that training never
sees), filtered to the contract's specialist, newest first, capped by the suite's ``limit``. ``@latest``
resolves when the suite is read, and the report records the dataset, the resolved version and the
episode ids, so it can be made again. Each episode becomes one record of the harness's suite format:
the conversation before its last answer is the request; the answer (or its correction) is the
reference when the user did not disown it.

``{name: core, data: "traffic:since-promotion"}`` evaluates on what `mint serve` logged (``$MINT_HOME/logs``):
the distinct requests routed to the contract's specialist in the window (``since-promotion``: served since its
champion was promoted, every turn before it there is none; ``all``), on the held-out side of the split
(mint.data.split: the served traffic's share, which experience and training never read), newest first,
capped like any suite (its ``limit``, the power planner's size). A record is the request alone (the system and
user turns before the answer): the served answer is the champion's own, never a reference, so only a harness
that scores a request without one (``request_metrics``) takes such a suite. The report records the window, what
it resolved to, the share and the episode ids, and where the slice is smaller than a gate's ``detect`` needs,
the planner's figures (``underpowered``).
"""
from __future__ import annotations

import hashlib
import json

from dataclasses import dataclass

from mint.contract.schema import Contract, Suite, read_suite, suite_cap
from mint.errors import BadInput
from mint.harness import LoggedAnswer, specialist
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
    """The suite record an episode makes for ``harness_name`` (its specialist's ``suite_record``), or None when
    it cannot make one."""
    spec = specialist(harness_name)
    split = _answer(episode)
    if spec is None or spec.suite_record is None or split is None:
        return None
    prompt, answer = split
    feedback = episode.get("feedback") or {}
    record = {"id": episode["id"], "messages": [{"role": m["role"], "content": m.get("content") or ""}
                                                for m in prompt if m.get("role") in ("system", "user")]}
    logged = LoggedAnswer(answer, feedback.get("correction"), answer is not None and (feedback.get("rating") or 0) >= 0,
                          episode.get("tools") or [])
    return spec.suite_record(record, logged)


def read_live_suite(ws: Workspace, contract: Contract, suite: Suite, limit: int | None = None
                    ) -> tuple[list[dict], dict]:
    """(records, provenance): the held-out episodes of the contract's specialist as of the suite's version,
    newest first, up to the smaller of the suite's limit and ``limit``. Every problem is BadInput at the
    suite's line in the contract."""
    from mint.data.datasets import HELDOUT_FRACTION, chain, iter_episodes, resolve_version

    refuse = _refusal(contract, suite)

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


def _refusal(contract: Contract, suite: Suite):
    return lambda message: contract.doc.error(suite.where, message) if contract.doc is not None else \
        BadInput(message, file=str(contract.path), field=suite.where)


# --- suites drawn from the served traffic ---------------------------------------------------------

@dataclass(frozen=True)
class TrafficSlice:
    """The held-out side of a window of the served traffic, for one contract suite: every distinct request routed
    to the contract's specialist, newest first, and what it resolved to."""

    records: list[dict]
    provenance: dict

    @property
    def count(self) -> int:
        return len(self.records)


def promoted_since(ws: Workspace, specialist: str) -> tuple[str | None, str | None]:
    """(when the champion of ``specialist`` became champion, its ref); (None, None) without one."""
    from mint.registry import queries

    champion = queries.champion(ws, specialist)
    if champion is None:
        return None, None
    moved = [e for e in queries.history(ws, specialist) if e.alias == "champion" and e.new == champion]
    return (moved[-1].at if moved else None), queries.revision_ref(ws, champion)


def traffic_slice(ws: Workspace, contract: Contract, suite: Suite) -> TrafficSlice:
    """Every held-out request of the suite's window (uncapped); see the module docstring."""
    from mint.data.split import heldout_rule
    from mint.data.traffic import read_turns, logs_dir

    since, champion = promoted_since(ws, contract.specialist) if suite.traffic == "since-promotion" else (None, None)
    held = heldout_rule(ws)
    harness = contract.harness()
    turns = [t for t in read_turns(ws) if t.get("specialist") == contract.specialist
             and (since is None or _at_or_after(t.get("ts"), since))]
    records, seen, heldout_turns = [], set(), 0
    for turn in reversed(turns):                # newest first
        split = _answer(turn)
        if split is None or not held(turn):
            continue
        heldout_turns += 1
        messages = [{"role": m["role"], "content": m.get("content") or ""} for m in split[0]
                    if m.get("role") in ("system", "user")]
        request = json.dumps(messages, sort_keys=True, ensure_ascii=False)
        if request in seen:
            continue
        record = {"id": turn["id"], "messages": messages}
        try:
            harness.check_record(record)
        except RecordProblem:
            continue
        seen.add(request)
        records.append(record)
    provenance = {"traffic": suite.traffic, "since": since, "champion": champion, "logs": str(logs_dir(ws)),
                  "heldout_share": held.share.heldout, "share_since": held.share.since,
                  "served": len(turns), "heldout_turns": heldout_turns, "heldout_requests": len(records)}
    return TrafficSlice(records, provenance)


def _at_or_after(stamp, since: str) -> bool:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) >= \
            datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return False        # a turn without a readable time is not known to be in the window


def underpowered(contract: Contract, suite: Suite, examples: int) -> list[dict]:
    """The power planner's figures for each gate on ``suite`` whose ``detect`` needs more than ``examples``."""
    from dataclasses import asdict

    from mint.contract.planner import plan_gate

    out = []
    for gate in contract.gates:
        if gate.suite != suite.name or gate.detect is None:
            continue
        plan = plan_gate(gate, examples, rules=contract.gate_rules, confidence=contract.confidence,
                         target=contract.power.target, churn=contract.power.churn)
        if plan is not None and plan.enough is False:
            out.append(asdict(plan))
    return out


def read_traffic_suite(ws: Workspace, contract: Contract, suite: Suite, limit: int | None = None
                       ) -> tuple[list[dict], dict]:
    """(records, provenance) of a traffic suite, capped by ``suite_cap``; an empty slice is BadInput at the
    suite's line."""
    sliced = traffic_slice(ws, contract, suite)
    cap = suite_cap(contract, suite, limit)
    records = sliced.records[:cap] if cap is not None else sliced.records
    if not records:
        where = f"since {sliced.provenance['since']}" if sliced.provenance["since"] else "in the logs"
        raise _refusal(contract, suite)(
            f"the served traffic holds no held-out {contract.specialist} request {where} "
            f"({sliced.provenance['served']} served, {sliced.provenance['heldout_share']:g} held out, in "
            f"{sliced.provenance['logs']}): serve more requests, or use a suite file")
    ids = [r["id"] for r in records]
    provenance = {**sliced.provenance, "count": len(ids),
                  "episodes_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
                  "episodes": ids if len(ids) <= MAX_LISTED_IDS else None}
    short = underpowered(contract, suite, len(records))
    if short:
        provenance["underpowered"] = short
    return records, provenance


@dataclass(frozen=True)
class TrafficShortfall:
    """A traffic suite whose held-out slice is smaller than the power planner's size for its gates."""

    contract: str
    version: int
    path: str
    suite: str
    window: str
    since: str | None
    count: int
    planned: int
    plans: list[dict]

    @property
    def message(self) -> str:
        finds = "; ".join(f"{p['needed']} find {p['metric']}'s {p['detect']:g} ({p['rule']}) {p['target']:.0%} of "
                          "the time" for p in self.plans if p.get("needed"))
        window = f"served since the champion's promotion ({self.since})" if self.since else \
            ("served in all" if self.window == "all" else "served (no champion yet: all of it)")
        return (f"not enough traffic yet: {self.count} of {self.planned} held-out requests {window} for suite "
                f"{self.suite} of contract {self.contract} v{self.version} ({self.path}): {finds} (the power "
                "planner)")


def traffic_shortfalls(ws: Workspace, contract: Contract) -> list[TrafficShortfall]:
    """Each traffic suite of ``contract`` whose held-out slice is smaller than its gates' ``detect`` need."""
    from mint.contract.planner import planned_size

    out = []
    for suite in contract.suites:
        planned = planned_size(contract, suite.name) if suite.traffic is not None else None
        if planned is None:
            continue
        sliced = traffic_slice(ws, contract, suite)
        if sliced.count < planned:
            out.append(TrafficShortfall(contract.name, contract.version, str(contract.path), suite.name,
                                        suite.traffic, sliced.provenance["since"], sliced.count, planned,
                                        underpowered(contract, suite, sliced.count)))
    return out


def traffic_fingerprint(ws: Workspace, contract: Contract, limit: int | None = None) -> list:
    """What the contract's traffic suites would read now (each one's share and record ids): an evaluation of the
    same candidate on other traffic is another evaluation."""
    out = []
    for suite in contract.suites:
        if suite.traffic is not None:
            sliced = traffic_slice(ws, contract, suite)
            cap = suite_cap(contract, suite, limit)
            records = sliced.records[:cap] if cap is not None else sliced.records
            out.append([suite.name, sliced.provenance["heldout_share"], [r["id"] for r in records]])
    return out


def read_suites(ws: Workspace, contract: Contract, limit: int | None = None) -> tuple[list, dict]:
    """Every suite's records as (suite, records) pairs, and the provenance of each live one by name."""
    suites, live = [], {}
    for suite in contract.suites:
        if suite.traffic is not None:
            records, live[suite.name] = read_traffic_suite(ws, contract, suite, limit)
        elif suite.live:
            records, live[suite.name] = read_live_suite(ws, contract, suite, limit)
        else:
            records = read_suite(contract, suite, limit)
        suites.append((suite, records))
    return suites, live
