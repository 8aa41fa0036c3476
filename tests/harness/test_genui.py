import json
from pathlib import Path

from mint.cli import main
from mint.harness.base import HarnessSettings
from mint.harness.genui import GenuiHarness, parse_tree

HELDOUT = [json.loads(l) for l in open(Path(__file__).parents[2] / "examples/heldout/genui.jsonl")]


def test_reference_trees_are_valid_and_broken_ones_are_not():
    harness = GenuiHarness(HarnessSettings())
    good = harness.aggregate([harness.score(r, [json.dumps(r["reference"])]) for r in HELDOUT])
    assert good == {"parse_rate": 1.0, "schema_valid_rate": 1.0, "required_props_rate": 1.0, "root_type_match": 1.0}
    record = HELDOUT[0]
    missing = {"type": "Button", "props": {"label": "Go"}}                       # no action
    unknown = {"type": "Carousel", "props": {}}
    (s1,), (s2,), (s3,) = ([harness.score(record, [o])] for o in
                           (json.dumps(missing), json.dumps(unknown), "here is a form"))
    assert (s1["parse_rate"], s1["schema_valid_rate"], s1["required_props_rate"]) == (1.0, 0.0, 0.0)
    assert (s2["schema_valid_rate"], s2["required_props_rate"]) == (0.0, 0.0)
    assert s3["parse_rate"] == 0.0


def test_fenced_tree_parses():
    assert parse_tree('```json\n{"type": "Text", "props": {"text": "hi"}}\n```') == \
        {"type": "Text", "props": {"text": "hi"}}


def test_render_writes_a_page(tmp_path, capsys):
    tree = HELDOUT[0]["reference"]
    (tmp_path / "tree.json").write_text(json.dumps(tree))
    assert main(["genui", "render", str(tmp_path / "tree.json"), "-o", str(tmp_path / "page.html"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    page = (tmp_path / "page.html").read_text()
    assert result["valid"] and page.startswith("<!doctype html>") and "<" in page
    (tmp_path / "bad.json").write_text("nope")
    assert main(["genui", "render", str(tmp_path / "bad.json"), "-o", str(tmp_path / "x.html")]) == 2
