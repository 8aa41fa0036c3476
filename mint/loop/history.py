"""What the loop keeps of its runs: ``$MINT_HOME/loops/<recipe>/state.json``.

Besides the finished steps by key, the runner records each generation it made (the candidate, its gated
metrics, the experience it learned from and its placebo twin's comparison), so `mint report` shows a
generation's experience and twin long after the run that made it. This module reads and checks that file;
it imports only ``mint.errors`` and ``mint.workspace``, so the report reads it without importing the loop.
"""
from __future__ import annotations

import json
from pathlib import Path

from mint.errors import BadInput
from mint.workspace import Workspace

STATE_FILE = "state.json"
LOOPS_DIR = "loops"
_TEXT, _OBJECT, _LIST = (str, type(None)), (dict, type(None)), (list, type(None))
_COUNT, _RATE = (int,), (int, float, type(None))
# what `mint report` reads of a recorded generation (mint.loop.runner.GenerationRow), each with its types
GENERATION_FIELDS = {"candidate": _TEXT, "iteration": (int,), "verdict": _TEXT, "reason": _TEXT,
                     "experience": _OBJECT, "twin": _OBJECT}
EXPERIENCE_FIELDS = {"pool": _OBJECT, "accepted_per_source": _OBJECT, "kept_per_source": _OBJECT,
                     "families": _LIST}
# one family of an experience's requests (mint.loop.results.FamilyStats)
FAMILY_FIELDS = {"family": (str,), "requests": _COUNT, "samples": _COUNT, "k": _COUNT, "raw_pass_at_1": _RATE,
                 "raw_pass_at_k": _RATE, "repaired_pass_at_1": _RATE, "repaired_pass_at_k": _RATE, "always": _COUNT,
                 "sometimes": _COUNT, "never": _COUNT, "signal": _RATE, "accepted": _COUNT}
TWIN_FIELDS = {"revision": _TEXT, "revision_id": _TEXT, "report": _TEXT, "verdict": _TEXT, "vs_twin": _OBJECT,
               "steps_control": _OBJECT}
STEPS_CONTROL_FIELDS = {"revision": _TEXT, "revision_id": _TEXT, "report": _TEXT, "vs_control": _OBJECT}


def state_path(ws: Workspace, recipe_name: str) -> Path:
    return ws.home / LOOPS_DIR / recipe_name / STATE_FILE


def read_state(path: Path) -> dict:
    """The loop state in ``path`` ({} when there is none yet); anything but the shape the runner writes is a
    BadInput naming the file and the field (exit 2), never a traceback later."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput(f"unreadable loop state ({exc}); move it away to start over", file=str(path)) from None
    if not isinstance(data, dict):
        raise BadInput("not a loop state: expected a JSON object; move it away to start over", file=str(path))
    for key, kind, what in (("steps", dict, "an object"), ("last_run", dict, "an object"),
                            ("runs", list, "a list"), ("generations", list, "a list")):
        if key in data and not isinstance(data[key], kind):
            raise BadInput(f"expected {what}; move the file away to start over", file=str(path), field=key)
    for i, row in enumerate(data.get("generations", [])):
        where = f"generations[{i}]"
        if not isinstance(row, dict):
            raise BadInput("expected an object", file=str(path), field=where)
        if not isinstance(row.get("specialist"), str):
            raise BadInput("expected the specialist's name", file=str(path), field=f"{where}.specialist")
        _check_fields(path, where, row, GENERATION_FIELDS)
        for part, fields in (("experience", EXPERIENCE_FIELDS), ("twin", TWIN_FIELDS)):
            if isinstance(row.get(part), dict):
                _check_fields(path, f"{where}.{part}", row[part], fields)
        families = row["experience"].get("families") if isinstance(row.get("experience"), dict) else None
        for j, family in enumerate(families or []):
            where_family = f"{where}.experience.families[{j}]"
            if not isinstance(family, dict) or not isinstance(family.get("family"), str):
                raise BadInput("expected an object naming its family", file=str(path), field=where_family)
            _check_fields(path, where_family, family, FAMILY_FIELDS)
        control = (row.get("twin") or {}).get("steps_control")
        if isinstance(control, dict):
            _check_fields(path, f"{where}.twin.steps_control", control, STEPS_CONTROL_FIELDS)
    return data


def _check_fields(path: Path, where: str, row: dict, fields: dict) -> None:
    for key, kinds in fields.items():
        if key in row and (not isinstance(row[key], kinds) or isinstance(row[key], bool)):
            expected = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise BadInput(f"expected {expected}, not {type(row[key]).__name__}", file=str(path),
                           field=f"{where}.{key}")


def generation_records(ws: Workspace) -> list[dict]:
    """Every generation any recipe's loop recorded in this workspace, each with its ``recipe``, in the order
    recorded (recipes by name)."""
    root = ws.home / LOOPS_DIR
    if not root.is_dir():
        return []
    records = []
    for path in sorted(root.glob(f"*/{STATE_FILE}")):
        records += [{**row, "recipe": path.parent.name} for row in read_state(path).get("generations", [])]
    return records
