"""Reliability suite 4, fast form: every tampering of a revision's files (one byte flip per file, truncation,
deletion, swaps, extra files) and of its report is refused by load, serve, promote and verify. The long form
is scripts/reliability_tamper.py."""
import json
from pathlib import Path

import pytest

from mint.errors import Refused
from mint.registry.artifacts import load_revision, revision_dir
from mint.registry.maintenance import verify
from mint.registry.promotion import promote
from tests.reliability.scripts import load_script


def test_every_tampering_is_refused_by_every_consumer(tmp_path, ws):
    tried, failures, controls = load_script("tamper").run_suite(tmp_path, flips=1, seed=0)
    assert controls == []                      # the intact revision loads, serves, promotes and verifies
    assert tried >= 60 and failures == []


def test_promote_refuses_a_revision_whose_weights_changed_on_disk(ws, candidate, report_for):
    revision = candidate()
    weights = revision_dir(ws, revision) / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(Refused, match="adapter_model.safetensors: sha256 differs"):
        promote(ws, revision.ref, report_path=report_for(revision))


def test_force_promote_still_refuses_tampered_files(ws, candidate):
    revision = candidate()
    (revision_dir(ws, revision) / "adapter_model.bin").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(Refused, match="adapter_model.bin: not part of the revision"):
        promote(ws, revision.ref, force=True, why="operator override")


@pytest.mark.parametrize("field, value", [("method", "dpo"), ("status", "champion")])
def test_an_edited_field_of_mint_json_is_refused(ws, candidate, field, value):
    """mint.json's metadata (not only its file list) must match the registry's; it keeps the status at
    registration, which is always candidate."""
    revision = candidate()
    path = revision_dir(ws, revision) / "mint.json"
    metadata = json.loads(path.read_text())
    metadata[field] = value
    path.write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    with pytest.raises(Refused, match=f"{field} differ from the registry's"):
        load_revision(ws, revision.ref)
    assert [p["problem"] for p in verify(ws).problems] == [f"{path}: {field} differ from the registry's"]


def test_a_promoted_revision_still_verifies(ws, candidate, report_for):
    """status moves after registration; mint.json keeps the first one and that is not a tampering."""
    revision = candidate()
    promote(ws, revision.ref, report_path=report_for(revision))
    assert verify(ws).ok
    load_revision(ws, "coding:champion")


def test_reading_a_dataset_version_changed_after_ingest_is_refused(ws, project):
    from mint.data.datasets import dataset_dir, iter_episodes, read_head
    from mint.data.ingest import ingest

    ingest(ws, [Path(__file__).resolve().parents[2] / "examples" / "logs" / "app_openai.jsonl"], dataset="logs",
           project=project, workers=0)
    episodes = dataset_dir(ws, "logs") / read_head(dataset_dir(ws, "logs")) / "episodes.jsonl"
    intact = sum(1 for _ in iter_episodes(ws, "logs"))
    episodes.write_bytes(episodes.read_bytes().replace(b'"role":"user"', b'"role":"system"', 1))
    with pytest.raises(Refused, match="changed after ingest"):
        next(iter_episodes(ws, "logs"))
    assert intact > 0
