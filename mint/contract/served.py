"""Contracts decoded on the engine that serves users: an OpenAI-compatible server that loads LoRA adapters at
runtime (vLLM), named by mint.yaml's ``engine: {url: ...}`` or ``mint eval --engine URL``.

Before any answer is decoded the server is asked what it serves (/v1/models): its base must be the evaluation's,
and every candidate is loaded (POST /v1/load_lora_adapter) under a name that carries its revision id
(``genui-v3-<id12>``: vLLM keys its prefix cache by adapter name, so a name never stands for other weights),
refused where its rank is above what the server says it loads (a mint upstream's /health; vLLM says nothing, and
then its refusal to load is the error). The suites' conversations, rendered as the local engine's
(``evaluation_conversations``: the harness's system turn with its tools, and request), are sent as chat
completions with the contract's decoding settings, several at a time. Candidates this evaluation loaded are
unloaded after it; one the server had already (a champion the gateway serves) is left as it was.

The report's decoding identity names the engine (its base model id and version), so answers and baselines decoded
by mint's own engine are never paired with a served candidate's: they are decoded again on the server.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from mint.errors import BadInput
from mint.project import LOCAL_ENGINE, ServedEngine

if TYPE_CHECKING:
    from mint.generation.upstream import Upstream, UpstreamClient

CONNECT_TIMEOUT_S = 5.0      # a server that is down fails in seconds, however long an answer may take
IN_FLIGHT = 8                # requests sent at once: a batch for the server, not a flood
SERVED = "served"            # the precision of answers a server decoded (its dtype is its own)


def resolve_engine(choice: str | None) -> ServedEngine | None:
    """The engine an evaluation decodes on: ``choice`` (``local`` or a URL, from ``--engine``), else mint.yaml's
    ``engine``; None for mint's own. A URL given here keeps mint.yaml's key and timeout."""
    from mint.project import load_project

    configured = load_project().engine
    if choice is None:
        return configured
    if choice == LOCAL_ENGINE:
        return None
    if not re.match(r"^https?://[^/\s]+", choice):
        raise BadInput(f"expected `{LOCAL_ENGINE}` or an http(s) URL of an OpenAI-compatible server, got {choice!r}",
                       field="--engine")
    return ServedEngine(choice, configured.api_key_env if configured else None,
                        configured.timeout_s if configured else 60.0)


def served_name(revision) -> str:
    """The name a candidate is loaded under: its ref's (``genui-v3``, as the gateway's) and its id's first 12."""
    from mint.registry.refs import adapter_name

    return f"{adapter_name(revision.ref)}-{revision.id[:12]}"


def report_engine(report) -> dict | None:
    """The served engine a report's answers were decoded on (its generation's ``engine``); None for mint's own."""
    for facts in (report.generation if isinstance(report.generation, dict) else {}).values():
        engine = facts.get("engine") if isinstance(facts, dict) else None
        if isinstance(engine, dict) and engine.get("kind") == SERVED:
            return {k: v for k, v in engine.items() if k != "url"}
    return None


def engine_text(report) -> str:
    """A report's engine in words (`mint report show`, `mint eval`)."""
    for facts in (report.generation if isinstance(report.generation, dict) else {}).values():
        engine = facts.get("engine") if isinstance(facts, dict) else None
        if isinstance(engine, dict) and engine.get("kind") == SERVED:
            version = f", version {engine['version']}" if engine.get("version") else ""
            return f"served by {engine.get('url', 'a server')} (base {engine.get('model')}{version})"
    return "mint's engine (local)" if report.generation else "none (outputs made elsewhere)"


def served_prompt_digest(conversation: list[dict], seed: int | None) -> str:
    """A prompt's key among a served engine's answers: the conversation sent (the server renders it) and the seed."""
    return hashlib.sha256(json.dumps([conversation, seed], sort_keys=True).encode()).hexdigest()


class ServedFailure(Exception):
    """One request the server did not answer with a chat completion."""


def open_engine(engine: ServedEngine | None, base_name: str) -> "ServedEngineSession | None":
    """A session on ``engine`` (None for mint's own): the server answers, and serves ``base_name``; else BadInput,
    naming the URL and what it said, before anything is decoded."""
    if engine is None:
        return None
    from mint.base import portable_name
    from mint.generation.upstream import Upstream, UpstreamClient, UpstreamError

    file, line = engine.at
    key = None
    if engine.api_key_env:
        key = os.environ.get(engine.api_key_env)
        if not key:
            raise BadInput(f"the environment variable {engine.api_key_env} is not set (the engine's API key)",
                           file=file, line=line, field="engine.api_key_env")
    upstream = Upstream(engine.url, key, engine.timeout_s)
    client = UpstreamClient(upstream, connect_s=min(CONNECT_TIMEOUT_S, engine.timeout_s))
    try:
        listed = client.models()
    except UpstreamError as exc:
        client.close()
        raise BadInput(f"the engine {upstream.api} does not answer: {exc}", file=file, line=line,
                       field=engine.field) from None
    served_base = next((m["id"] for m in listed if not m.get("parent")), None)
    accepted = {base_name, portable_name(base_name), str(Path(base_name).expanduser().absolute())}
    if served_base is None or served_base not in accepted:
        client.close()
        raise BadInput(f"the engine {upstream.api} serves the base {served_base!r}, but this evaluation's base is "
                       f"{base_name} ({portable_name(base_name)}): start the server on it, or evaluate with "
                       "--engine local", file=file, line=line, field=engine.field)
    said = client.health() or {}
    return ServedEngineSession(engine, upstream, client, served_base, client.version(), listed,
                               _count(said.get("max_rank")), _count(said.get("max_loras")))


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass
class ServedEngineSession:
    """An evaluation's hold on a served engine: what it serves, the names its subjects answer under, the adapters
    this evaluation loaded (unloaded by ``close``)."""
    engine: ServedEngine
    upstream: Upstream
    client: UpstreamClient
    base_model: str                # the server's name of the bare base
    version: str | None            # what /version says
    listed: list[dict]             # /v1/models when the session opened
    max_rank: int | None           # the largest LoRA rank it loads, where it says so
    max_loras: int | None
    names: dict[str, str] = field(default_factory=dict)     # subject key -> the model name it answers under
    loaded: list[str] = field(default_factory=list)

    @property
    def identity(self) -> dict:
        """What the decoding identity records of the engine: its kind, base model id and version (not its host)."""
        return {"kind": SERVED, "model": self.base_model, "version": self.version}

    def _error(self, message: str) -> BadInput:
        return BadInput(message, file=self.engine.at[0], line=self.engine.at[1], field=self.engine.field)

    def precision(self, contract):
        from mint.contract.precision import DecodingPrecision

        return DecodingPrecision(contract.settings.precision, SERVED,
                                 f"decoded by the engine at {self.upstream.api}, at the precision it was started with")

    def prepare(self, subjects) -> None:
        """Every subject's model name on the server: the bare base's, and each candidate loaded under its
        revision's name (or found loaded already); a rank or count the server cannot hold, or a load it refuses,
        is BadInput naming the candidate, before anything is decoded."""
        from mint.contract.answers import BASE
        from mint.registry.servers import adapter_rank
        from mint.generation.upstream import UpstreamError

        adapters = [s for s in subjects if s.adapter_dir is not None]
        for subject in adapters:
            rank = adapter_rank(Path(subject.adapter_dir))
            if self.max_rank is not None and rank > self.max_rank:
                raise self._error(f"{subject.label} has LoRA rank {rank}, above the {self.max_rank} the engine at "
                                  f"{self.upstream.api} loads")
        if self.max_loras is not None and len(adapters) > self.max_loras:
            raise self._error(f"{len(adapters)} adapters to evaluate, but the engine at {self.upstream.api} holds "
                              f"{self.max_loras}: evaluate fewer revisions at once")
        listed = {m["id"] for m in self.listed}
        by_path = {str(Path(m["root"]).resolve()): m["id"] for m in self.listed
                   if m.get("parent") and isinstance(m.get("root"), str)}
        self.names[BASE] = self.base_model
        for subject in adapters:
            name = served_name(subject.revision)
            found = name if name in listed else by_path.get(str(Path(subject.adapter_dir).resolve()))
            if found is not None:          # loaded before this evaluation: left loaded after it
                self.names[subject.key] = found
                continue
            try:
                self.client.load_adapter(name, str(subject.adapter_dir))
            except UpstreamError as exc:
                raise self._error(f"{subject.label} could not be loaded: {exc}") from None
            self.loaded.append(name)
            self.names[subject.key] = name

    def close(self) -> None:
        """Unload what this evaluation loaded (a server that went away has nothing left to unload)."""
        from mint.generation.upstream import UpstreamError

        for name in self.loaded:
            try:
                self.client.unload_adapter(name)
            except UpstreamError:
                break
        self.loaded.clear()
        self.client.close()

    def decode(self, contract, suites, subjects, progress, precision, fingerprint: str, *,
               reuse: dict | None = None, own_suites: dict[str, set[str]] | None = None) -> dict:
        """As ``mint.contract.evaluate._decode``: each subject's (outputs, latencies, generation facts, prompt
        digests) per suite, answered by the server; a request it fails is BadInput naming the suite and example."""
        from mint.contract.answers import decoding_identity, evaluation_conversations, gather_answers, record_id

        reuse = reuse or {}
        settings = contract.settings
        own = {s.key: (own_suites or {}).get(s.key) or {suite.name for suite, _ in suites} for s in subjects}
        owners = [(suite, record) for suite, records in suites for record in records]
        conversations = evaluation_conversations(contract.harness(), suites)
        sampled = settings.temperature > 0
        digests = [served_prompt_digest(conversation, c * settings.samples if sampled else None)
                   for c, conversation in enumerate(conversations)]
        wanted = {s.key: [c for c, (suite, _r) in enumerate(owners) if suite.name in own[s.key]
                          and digests[c] not in reuse.get(s.key, {})] for s in subjects}
        decoding = [s for s in subjects if wanted[s.key]]
        totals = {suite.name: len(records) for suite, records in suites}
        done = {(s.key, name): 0 for s in decoding for name in totals}

        def label(subject, name: str) -> str:
            return name if len(subjects) == 1 else f"{subject.label} {name}"

        if progress:
            for subject in decoding:
                for name in totals:
                    if name in own[subject.key]:
                        progress(label(subject, name), 0, totals[name])
        fresh: dict[str, dict[int, tuple]] = {s.key: {} for s in subjects}
        started = time.perf_counter()
        import httpx

        http = httpx.Client(timeout=httpx.Timeout(self.engine.timeout_s, connect=CONNECT_TIMEOUT_S))
        pool = ThreadPoolExecutor(IN_FLIGHT)
        try:
            asked = {pool.submit(self._answer, http, self.names[subject.key], conversations[c], settings,
                                 c * settings.samples): (subject, c)
                     for subject in decoding for c in wanted[subject.key]}
            for future in as_completed(asked):
                subject, c = asked[future]
                suite, record = owners[c]
                try:
                    fresh[subject.key][c] = future.result()
                except ServedFailure as exc:
                    raise self._error(f"the engine at {self.upstream.api} failed {subject.label}'s answer to suite "
                                      f"{suite.name} example {record_id(record)!r}: {exc}") from None
                done[(subject.key, suite.name)] += 1
                if progress:
                    progress(label(subject, suite.name), done[(subject.key, suite.name)], totals[suite.name])
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            http.close()
        seconds = time.perf_counter() - started
        identity = decoding_identity(contract, precision.used, fingerprint, self.identity)
        all_tokens = sum(tokens for answers in fresh.values() for _o, _l, tokens in answers.values())
        decoded = {}
        for subject in subjects:
            answers = gather_answers(suites, owners, own[subject.key], fresh[subject.key], reuse.get(subject.key, {}), digests)
            generation = {name: {"precision": precision.used, "reason": precision.reason,
                                 "new_tokens": answers.tokens[name],
                                 "tokens_per_s": round(all_tokens / seconds, 2) if fresh[subject.key] else None,
                                 "engine": {**self.identity, "url": self.upstream.api}, "decoding": identity,
                                 "model": self.names.get(subject.key), **answers.reuse_facts(name),
                                 **({"stream": [s.label for s in decoding]} if len(decoding) > 1 else {})}
                          for name in answers.outputs}
            decoded[subject.key] = (answers.outputs, answers.latencies, generation, answers.prompts)
        return decoded

    def _answer(self, http, model: str, conversation: list[dict], settings, first_seed: int) -> tuple:
        """``settings.samples`` answers to ``conversation`` from ``model`` (output ``s`` with seed
        ``first_seed + s`` where sampled, as mint's engine draws), the milliseconds they took, tokens made."""
        import httpx

        from mint.generation.upstream import upstream_message

        url = f"{self.upstream.api}/chat/completions"
        outputs, tokens, started = [], 0, time.perf_counter()
        for sample in range(settings.samples):
            body = {"model": model, "messages": conversation, "max_tokens": settings.max_new_tokens,
                    "temperature": settings.temperature, "top_p": settings.top_p, "stream": False,
                    **({"seed": first_seed + sample} if settings.temperature > 0 else {})}
            try:
                reply = http.post(url, json=body, headers=self.upstream.headers())
            except httpx.TimeoutException:
                raise ServedFailure(f"no answer within {self.engine.timeout_s:g} s") from None
            except httpx.HTTPError as exc:
                raise ServedFailure(f"cannot reach {url}: {exc}") from None
            if reply.status_code != 200:
                raise ServedFailure(upstream_message(reply.status_code, reply.text))
            try:
                data = reply.json()
                outputs.append(data["choices"][0]["message"]["content"] or "")
            except (ValueError, KeyError, IndexError, TypeError):
                raise ServedFailure("it answered something other than a chat completion") from None
            usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
            tokens += usage.get("completion_tokens") or 0
        return outputs, round((time.perf_counter() - started) * 1000, 3), tokens
