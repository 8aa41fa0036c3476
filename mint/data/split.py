"""The held-out split: one rule, decided by a request's content, that every reader of the same data agrees on.

A request's **position** is a keyed hash of the text of its first user message, mapped to [0, 1). A request is
held out at share S when its position is below S, so shares nest: a request held out at 10% is held out at
50%. Two shares exist:

- a dataset's, ``HELDOUT_FRACTION`` (10%): the split that `dataset:NAME@latest` suites evaluate on;
- the served traffic's (``$MINT_HOME/logs/.split.json``): the share of what `mint serve` logged that contract
  suites drawn from the traffic (``traffic:WINDOW``) evaluate on. It is set by whoever writes the first turn
  (the recipe's or mint.yaml's ``traffic: {heldout: S}``, else 10%) and never changes after, since a new share
  would move requests between what experience and training read and what contracts evaluate on; a server,
  recipe or mint.yaml that asks for another share later is refused.

Every reader applies both: a request is held out when its position is below 10%, or when it is a request of the
served traffic whose position is below the traffic's share, wherever it is read (a dataset it was ingested
into, a file of prompts, the logs themselves). So no held-out request reaches training (`mint train`, the
loop's train step), `mint data export` or experience, and every contract suite reads only held-out requests.
A request served once is the traffic's for as long as its turn is in ``$MINT_HOME/logs`` (until a
``--log-retention-days`` prunes it).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from pathlib import Path

from mint.data.traffic import CURRENT, logs_dir, scan_turns
from mint.errors import BadInput
from mint.workspace import Workspace, atomic_write_text

# Fixed key and dataset share, so an episode's side never changes as the dataset grows.
HELDOUT_FRACTION = 0.1
HELDOUT_KEY = b"mint-heldout-v1"
SPLIT_FILE = ".split.json"   # hidden: `mint ingest $MINT_HOME/logs` passes over it


def heldout_key(episode: dict) -> str | None:
    """What decides an episode's side: the text of its first user message. Not the episode id, because
    the same question must stay on one side when it is re-logged with more turns or later feedback (a
    new id), asked again, or answered by the champion as experience. None when there is no user turn."""
    for message in episode.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content, sort_keys=True, ensure_ascii=False)
    return None


def heldout_position(episode: dict) -> float | None:
    """A keyed hash of :func:`heldout_key` mapped to [0, 1); None when the episode has no user turn."""
    key = heldout_key(episode)
    if key is None:
        return None
    return int.from_bytes(_digest(key)[:8], "big") / 2 ** 64


def is_heldout(episode: dict, fraction: float = HELDOUT_FRACTION) -> bool:
    """Whether ``episode`` is held out at share ``fraction`` (the dataset's by default)."""
    position = heldout_position(episode)
    return position is not None and position < fraction


def _digest(key: str) -> bytes:
    return hmac.new(HELDOUT_KEY, key.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


# --- the served traffic's share ---------------------------------------------------------------------

@dataclass(frozen=True)
class TrafficShare:
    """The share of the served traffic held out, and since when (None: no turn was logged with a share yet, so
    the dataset's share applies, and the first turn logged fixes it)."""

    heldout: float
    since: str | None
    file: str

    @property
    def fixed(self) -> bool:
        return self.since is not None


def check_share(value, where: str) -> float:
    """A share as a contract, recipe or mint.yaml gives it: a number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise BadInput("expected the share of served requests held out, a number between 0 and 1 (0.5 holds "
                       "out half)", field=where)
    return float(value)


def traffic_share(ws: Workspace) -> TrafficShare:
    """The served traffic's held-out share (``logs/.split.json``); the dataset share until a turn fixes it."""
    path = logs_dir(ws) / SPLIT_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return TrafficShare(check_share(data["heldout"], "heldout"), str(data["since"]), str(path))
    except FileNotFoundError:
        return TrafficShare(HELDOUT_FRACTION, None, str(path))
    except (ValueError, KeyError, TypeError, BadInput):
        raise BadInput("is not the split mint writes ({\"heldout\": SHARE, \"since\": TIME}): it fixes which "
                       "served requests are held out, so mint will not guess; restore it", file=str(path)) from None


def share_conflict(ws: Workspace, wanted: float | None) -> str | None:
    """Why the traffic cannot be split at ``wanted`` (None: it can, or nothing asked for a share)."""
    if wanted is None:
        return None
    current = traffic_share(ws)
    if current.fixed:
        if abs(current.heldout - wanted) < 1e-12:
            return None
        return (f"the served traffic of this workspace holds out {current.heldout:g} of its requests since "
                f"{current.since} ({current.file}); {wanted:g} would move requests between what experience and "
                f"training read and what contracts evaluate on: ask for {current.heldout:g}, or serve into a new "
                "workspace")
    if _turns_logged(ws) and abs(wanted - HELDOUT_FRACTION) > 1e-12:
        return (f"{logs_dir(ws)} holds turns logged before a share was fixed, read as the dataset share "
                f"({HELDOUT_FRACTION:g}); {wanted:g} would move some of them to the other side: ask for "
                f"{HELDOUT_FRACTION:g}, or serve into a new workspace")
    return None


def fix_share(ws: Workspace, wanted: float | None) -> TrafficShare:
    """Fix the traffic's share before its first turn is written (the turn log calls it under its lock): ``wanted``
    or, with none asked for (or turns logged before shares were fixed), the dataset share."""
    current = traffic_share(ws)
    if current.fixed:
        return current
    share = wanted if wanted is not None and not _turns_logged(ws) else HELDOUT_FRACTION
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write_text(Path(current.file), json.dumps({"heldout": share, "since": since}) + "\n")
    return TrafficShare(share, since, current.file)


def _turns_logged(ws: Workspace) -> bool:
    directory = logs_dir(ws)
    return any(p.is_file() and p.stat().st_size for p in [directory / CURRENT, *directory.glob("served-*.jsonl")])


# --- the rule every reader applies ------------------------------------------------------------------

@dataclass(frozen=True)
class HeldOut:
    """The split as one reader sees it: the dataset share, and the held-out requests of the served traffic."""

    share: TrafficShare
    traffic: frozenset[bytes]      # keyed digests of the traffic's held-out requests

    def __call__(self, episode: dict) -> bool:
        key = heldout_key(episode)
        if key is None:
            return False
        digest = _digest(key)
        return int.from_bytes(digest[:8], "big") / 2 ** 64 < HELDOUT_FRACTION or digest in self.traffic


def heldout_rule(ws: Workspace) -> HeldOut:
    """Whether an episode (or ``{"messages": prompt}``) is held out, for every reader of ``ws``: its position
    is below the dataset share, or it is a request of the served traffic held out at the traffic's share."""
    share = traffic_share(ws)
    held = set()
    for turn in scan_turns(ws)[0]:
        key = heldout_key(turn)
        if key is not None:
            digest = _digest(key)
            if int.from_bytes(digest[:8], "big") / 2 ** 64 < share.heldout:
                held.add(digest)
    return HeldOut(share, frozenset(held))
