"""The local backend: the mixture answers each turn, batched with the turns of other clients.

Requests from concurrent clients are batched continuously, as vLLM does: the batcher thread waits up to
``window_ms`` after the first queued turn (or until ``max_batch`` are queued) and starts one mixed-adapter stream
with them, decoded by the engine contract evaluation decodes with (``mint.generation``); a turn queued while that
stream decodes joins it at its next step with room (at most ``max_batch`` rows at once), routed as it joins. Each
turn is answered, and logged, as soon as its own row finishes: a short turn never waits for a long one beside
it. A turn whose listener's receiver is gone (a client that left, streamed or not) stops at its row's next step,
unlogged.

A poller thread re-reads the registry's champion aliases every ``poll_s`` seconds and hot-swaps what moved. A
swap never happens mid-stream (a running row's adapter never changes under it): it waits for the stream, which
takes no more joining turns once a swap waits, so it ends within its rows' token limits; the next stream starts
after the swap. Turns queued meanwhile wait for that next stream.

Named adapters (``load_adapter``, vLLM's runtime LoRA API) load into the runtime's named slots; a request that
names one in ``model`` is answered by it, so a second `mint serve` can stand in for vLLM behind the gateway.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput, MintError
from mint.generation.constrain import JSON_OBJECT, JSON_SCHEMA, TOOL_CALL
from mint.generation.engine import CANCELLED
from mint.generation.text import TextListener
from mint.mol.mixture import Answer, Asked, Mixture, Turn
from mint.serve.backend import Backend, ChampionPoller
from mint.serve.protocol import MODEL, AdapterError


@dataclass
class _Job:
    turn: Turn
    future: Future
    listener: TextListener | None = None
    owner: str | None = None


class Batcher:
    """Collects turns from many clients and answers them together: the first queued turn waits up to
    ``window_ms`` for more (or until ``max_batch`` are queued), they start one mixed-adapter stream, turns queued
    later join it while it has room, and each turn's future is resolved as its row finishes."""

    def __init__(self, mixture: Mixture, *, window_ms: float = 10.0, max_batch: int = 16, join: bool = True) -> None:
        self.mixture, self.window_s, self.max_batch = mixture, window_ms / 1000, max_batch
        self.join = join          # False: a turn queued during a stream waits for its end (the benchmark's before)
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.batch_sizes: list[int] = []
        self.cancelled = 0        # turns whose client went away before the answer ended
        self.joined = 0           # turns that joined a running stream (not counted in batch_sizes)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="mint-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=60)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, turn: Turn, listener: TextListener | None = None, owner: str | None = None) -> Future:
        """The turn's future (its Answer, or the error that kept it from one)."""
        job = _Job(turn, Future(), listener, owner)
        self.jobs.put(job)
        return job.future

    def _run(self) -> None:
        while True:
            first = self.jobs.get()
            if first is None:
                return
            batch, deadline = [first], time.monotonic() + self.window_s
            while len(batch) < self.max_batch:
                try:
                    job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    self._stopping = True
                    break
                batch.append(job)
            self.batch_sizes.append(len(batch))
            # a champion load that waits goes first: the stream before it took no joining turns, so it ended
            self.mixture.runtime.wait_for_swaps()
            self._answer(batch, joinable=self.join and not self._stopping)
            if self._stopping:
                return

    def _answer(self, batch: list[_Job], *, joinable: bool = False) -> None:
        """Answer ``batch`` in one stream; with ``joinable``, turns queued meanwhile join it while it has room."""
        stream = list(batch)               # the stream's turns, the joined ones after the batch
        streamed = [False] * len(batch)

        def watch(index: int, listener: TextListener | None):
            if listener is None:
                return None
            if not getattr(listener, "wants_text", True):
                return listener

            def heard(*args, **kwargs):
                streamed[index] = True
                return listener(*args, **kwargs)
            return heard

        def join(room: int) -> list[Asked]:
            joined: list = []
            while len(joined) < room and not self._stopping:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:            # stop: the stream ends with the turns it has
                    self._stopping = True
                    break
                joined.append(job)
            asked = []
            for job in joined:
                stream.append(job)
                streamed.append(False)
                asked.append(Asked(job.turn, watch(len(stream) - 1, job.listener), job.owner))
            self.joined += len(joined)
            return asked

        def deliver(index: int, result: Answer | Exception) -> None:
            job = stream[index]
            if job.future.done():
                return
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                self.cancelled += result.finish_reason == CANCELLED
                job.future.set_result(result)

        try:
            results = self.mixture.answer_each([job.turn for job in batch],
                                               listeners=[watch(i, job.listener) for i, job in enumerate(batch)],
                                               owners=[job.owner for job in batch], on_answer=deliver,
                                               joining=join if joinable else None, max_batch=self.max_batch)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request(s)
            waiting = [(job, began) for job, began in zip(stream, streamed) if not job.future.done()]
            unstreamed = [job for job, began in waiting if not began]
            if len(stream) > 1 and unstreamed:
                # a failure of the whole stream cannot be pinned on one turn: the turns whose client has no text
                # yet are answered again each alone, so only a bad one gets its error (a streamed turn with text
                # out cannot be retried without sending it twice: it alone gets the error)
                for job, began in waiting:
                    if began:
                        job.future.set_exception(exc)
                for job in unstreamed:
                    self._answer([job])
                return
            for job, _began in waiting:
                job.future.set_exception(exc)
            return
        for index, result in enumerate(results):     # any answer not told as it finished
            deliver(index, result)


class LocalBackend(Backend):
    """``mixture`` answering the app's turns through a ``Batcher``."""

    loads_adapters = True
    structures = (JSON_OBJECT, JSON_SCHEMA, TOOL_CALL)     # constrained in the engine (mint.generation.constrain)

    def __init__(self, mixture: Mixture, *, window_ms: float = 10.0, max_batch: int = 16, poll_s: float = 2.0) -> None:
        super().__init__(mixture, mixture.project.names, ChampionPoller(mixture, poll_s))
        self.mixture = mixture
        self.batcher = Batcher(mixture, window_ms=window_ms, max_batch=max_batch)
        self.announcement: Path | None = None

    async def start(self) -> None:
        self.batcher.start()
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        self.batcher.stop()

    def context_limit(self) -> int | None:
        return self.mixture.runtime.context_limit()

    def adapter_names(self) -> tuple[str, ...]:
        return tuple(self.mixture.runtime.named)

    def health(self) -> tuple[bool, dict]:
        mixture, poller = self.mixture, self.poller
        errors = dict(mixture.runtime.sync_errors)
        ok = poller.alive and poller.last_error is None and not errors and self.batcher.alive
        revisions = mixture.revisions()
        specialists = {name: {"served": revisions[name], "rank": slot.rank, "error": errors.get(name)}
                       for name, slot in mixture.runtime.slots.items()}
        return ok, {"revisions": revisions, "specialists": specialists,
                    "router": revisions.get(mixture.project.router), "max_rank": mixture.runtime.max_rank,
                    "adapters": {name: {"served": slot.ref, "specialist": slot.specialist, "rank": slot.rank}
                                 for name, slot in mixture.runtime.named.items()},
                    "batches": len(self.batcher.batch_sizes), "joined": self.batcher.joined,
                    "cancelled": self.batcher.cancelled,
                    "poller": poller.state(), "sync_error": poller.last_error}

    def models(self) -> list[dict]:
        # a loaded adapter is listed as vLLM lists one: with the model it adapts as its parent
        return [{"id": name, "object": "model", "created": 0, "owned_by": "mint", "parent": MODEL, "root": slot.ref}
                for name, slot in list(self.mixture.runtime.named.items())]

    async def answer(self, turn: Turn, owner: str | None, listener) -> Answer:
        return await asyncio.wrap_future(self.batcher.submit(turn, listener, owner))

    def load_adapter(self, name: str, path: str) -> None:
        try:
            self.mixture.runtime.load_named(name, Path(path))
        except BadInput as exc:
            missing = exc.field != "lora_name" and not Path(path).is_dir()
            raise AdapterError(404 if missing else 400, "NotFoundError" if missing else "InvalidUserInput",
                               str(exc), "lora_path" if exc.field != "lora_name" else "lora_name") from None
        except MintError as exc:
            raise AdapterError(400, "BadRequestError", str(exc), "lora_path") from None

    def unload_adapter(self, name: str) -> None:
        try:
            self.mixture.runtime.unload_named(name)
        except BadInput as exc:
            raise AdapterError(404, "NotFoundError", str(exc), "lora_name") from None

    def announce(self, url: str) -> None:
        from mint.registry.servers import announce

        self.announcement = announce(self.mixture.ws, max_rank=self.mixture.runtime.max_rank, url=url)

    def withdraw(self) -> None:
        from mint.registry.servers import withdraw

        if self.announcement is not None:
            withdraw(self.announcement)
            self.announcement = None
