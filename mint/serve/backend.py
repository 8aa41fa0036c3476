"""What the one app (``mint.serve.app``) answers through: the local mixture (``mint.serve.local``) or an upstream
OpenAI-compatible server (``mint.serve.gateway``).

A backend answers a turn (``answer``: a coroutine on the app's event loop, whose listener hears the text as it
is decoded and stops the turn by refusing), says whether it is healthy and what it serves (``health``,
``models``), logs every answered turn in its turn book (``turns``: the log `mint ingest` reads back, and the
feedback window), and keeps its champions current with a poller of its own. The app counts the queue and each
key's requests for both, one way (``mint.serve.app.Admission``).
"""
from __future__ import annotations

import threading
import time

from mint.errors import MintError
from mint.mol.mixture import Answer, Turn, TurnBook


class ChampionPoller:
    """Calls ``syncer.sync()`` every ``poll_s`` seconds (champion aliases re-read, what moved loaded). No error
    stops it: one it cannot get past (a registry it cannot read) is ``last_error``; a champion that fails to load
    is its specialist's, which the syncer keeps. While it runs it keeps the registry open (``store.hold``), so a
    promotion beside the server syncs the disk once, not five times."""

    def __init__(self, syncer, poll_s: float) -> None:
        self.syncer, self.poll_s = syncer, poll_s
        self.last_error: str | None = None
        self.last_poll: float | None = None
        self.handoffs: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mint-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def poll(self) -> None:
        try:
            self.handoffs += self.syncer.sync()
            self.last_error = None
        except Exception as exc:  # noqa: BLE001 - e.g. sqlite3.OperationalError: keep serving, say so in /health
            self.last_error = str(exc) if isinstance(exc, MintError) else f"{type(exc).__name__}: {exc}"
        self.last_poll = time.time()

    def _run(self) -> None:
        held = None      # the registry, kept open while serving (mint.registry.store.hold: why)
        try:
            while True:
                if held is None:
                    held = self._hold()
                if self._stop.wait(self.poll_s):
                    return
                self.poll()
        finally:
            if held is not None:
                held.close()

    def _hold(self):
        from mint.registry.store import hold

        try:
            return hold(self.syncer.ws)
        except Exception:  # noqa: BLE001 - an unreadable registry is poll()'s to report; held at a later poll
            return None

    def state(self) -> dict:
        return {"alive": self.alive, "last_poll": self.last_poll}


class Backend:
    """The interface the app answers through; ``turns`` is the turn book that logs what it answers."""

    loads_adapters = False      # whether /v1/load_lora_adapter and /v1/unload_lora_adapter load into it
    kind = "this server"        # how a refusal names it
    structures: tuple[str, ...] = ()    # the shapes it can hold an answer to (mint.generation.constrain's kinds)

    def __init__(self, turns: TurnBook, names: tuple[str, ...], poller: ChampionPoller) -> None:
        self.turns, self.names, self.poller = turns, names, poller

    async def start(self) -> None:
        self.poller.start()

    async def stop(self) -> None:
        self.poller.stop()

    def context_limit(self) -> int | None:
        """How many tokens the base takes in all (prompt and answer); None when unknown."""
        raise NotImplementedError

    def adapter_names(self) -> tuple[str, ...]:
        """Adapters loaded by name, which a request may name as its ``model``."""
        return ()

    def health(self) -> tuple[bool, dict]:
        """(whether it serves as it should, what /health tells a caller with a key besides status and queue)."""
        raise NotImplementedError

    def models(self) -> list[dict]:
        """/v1/models entries beyond mint's own (mint, mint/NAME)."""
        return []

    async def answer(self, turn: Turn, owner: str | None, listener) -> Answer:
        """``turn`` answered (and logged, unless cancelled), ``listener`` told its text as it is decoded; for the
        API key fingerprint ``owner``, which alone may give it feedback."""
        raise NotImplementedError

    def load_adapter(self, name: str, path: str) -> None:
        raise NotImplementedError

    def unload_adapter(self, name: str) -> None:
        raise NotImplementedError

    def announce(self, url: str) -> None:
        """Tell the workspace, while it serves at ``url``, the LoRA rank it loads (``mint.registry.servers``), so
        `mint promote` refuses a champion it could not load."""

    def withdraw(self) -> None:
        """Undo ``announce``."""

    def close(self) -> None:
        """Close the turn book's feedback window and whatever else it holds."""
        self.turns.close()
