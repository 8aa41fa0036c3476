"""The router champion places the ingested episodes no rule labels."""
from __future__ import annotations

from typing import Iterator

from mint.data.outcomes import Outcome, Unplaced, kept
from mint.data.schema import Message
from mint.project import Project
from mint.workspace import Workspace

# --- the router champion places what no rule labels --------------------------------------------------------

class ChampionRouter:
    """The router champion, asked about the episodes no rule labels (their conversation up to the last user
    turn, as the mixture asks it about a turn), in batches and in file order; the base it reads is loaded
    on the first batch."""

    BATCH = 64

    def __init__(self, router, base: str, revision: str) -> None:
        self.router, self.base, self.revision = router, base, revision
        self._loaded = None

    @classmethod
    def find(cls, ws: Workspace, project: Project) -> "ChampionRouter | None":
        from mint.routing.router import champion_router
        from mint.registry import store

        if not store.exists(ws):
            return None
        router, base = champion_router(ws, project)
        if router.probe is None:
            return None
        return cls(router, base or project.base, router.revision)

    def place(self, outcomes: Iterator[Outcome]) -> Iterator[Outcome]:
        """``outcomes`` in their order, each Unplaced one placed (a Kept labelled ``routed``)."""
        held: list[Outcome] = []
        waiting = 0
        for outcome in outcomes:
            if not held and not isinstance(outcome, Unplaced):
                yield outcome
                continue
            held.append(outcome)
            waiting += isinstance(outcome, Unplaced)
            if waiting >= self.BATCH:
                yield from self._placed(held)
                held, waiting = [], 0
        yield from self._placed(held)

    def _placed(self, held: list[Outcome]) -> list[Outcome]:
        unplaced = [o for o in held if isinstance(o, Unplaced)]
        if not unplaced:
            return held
        conversations = [asked_turns(o.episode.messages) for o in unplaced]
        routes = self.router.route(conversations, [False] * len(conversations), self._features)
        placed = iter(routes)
        out: list[Outcome] = []
        for outcome in held:
            if isinstance(outcome, Unplaced):
                episode = outcome.episode
                out.append(kept(episode.placed(next(placed).specialist, episode.source, "routed"), "routed",
                                outcome.scrubbed))
            else:
                out.append(outcome)
        return out

    def _features(self, conversations, layer, reads):
        from mint.base import load_base
        from mint.routing.router import probe_features

        if self._loaded is None:
            self._loaded = load_base(self.base)
        return probe_features(self._loaded.model, self._loaded.tokenizer, conversations, layer, reads)


def asked_turns(messages: tuple[Message, ...]) -> list[dict]:
    """The conversation up to its last user turn, as plain role/content turns."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=len(messages) - 1)
    return [{"role": m.role, "content": m.content} for m in messages[:last_user + 1]
            if m.role in ("system", "user", "assistant")]
