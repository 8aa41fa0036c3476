import gzip
import json

import pytest

from mint.data.readers import discover, read_source
from mint.errors import BadInput
from tests.conftest import chat_row, write_jsonl


def records(path, fmt="auto", cap=1_000_000):
    out = []
    for source in discover([path], fmt):
        out.extend(read_source(source, str(source.path), max_record_bytes=cap))
    return out


def test_jsonl_lines_carry_their_line_numbers(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("one"), "", "{broken", chat_row("two")])
    got = records(path)
    assert [(r.source.rsplit(":", 1)[1], r.error is None) for r in got] == [("1", True), ("3", False), ("4", True)]
    assert got[1].error.startswith("invalid JSON")
    assert got[1].raw == "{broken"


def test_gzip_jsonl(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(chat_row("zipped")) + "\n")
    assert records(path)[0].data["messages"][0]["content"] == "zipped"


def test_json_array_is_streamed_value_by_value_with_lines(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([chat_row("one"), chat_row("two")], indent=2))
    got = records(path)
    assert [r.data["messages"][0]["content"] for r in got] == ["one", "two"]
    assert got[0].source.endswith(":2") and int(got[1].source.rsplit(":", 1)[1]) > 2


def test_json_array_larger_than_the_read_buffer(tmp_path):
    path = tmp_path / "big.json"
    rows = [chat_row("x" * 5000 + str(i)) for i in range(400)]   # ~2 MB, two read chunks
    path.write_text(json.dumps(rows))
    got = records(path)
    assert len(got) == 400 and all(r.error is None for r in got)


def test_concatenated_json_values_in_a_json_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(chat_row("one"), indent=1) + "\n" + json.dumps(chat_row("two")))
    assert len(records(path)) == 2


def test_broken_json_array_quarantines_the_rest(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[{"messages": [{"role": "user", "content": "ok"}]},\n {"messages": oops}]')
    got = records(path)
    assert got[0].error is None
    assert got[1].error.startswith("invalid JSON") and got[1].source.endswith(":2")


def test_record_over_the_size_cap_is_reported_not_loaded(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("x" * 5000), chat_row("small")])
    got = records(path, cap=1000)
    assert "size cap" in got[0].error
    assert got[1].data["messages"][0]["content"] == "small"


def test_invalid_utf8_line_is_reported_and_the_next_line_read(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"messages": "\xff\xfe"}\n' + json.dumps(chat_row("fine")).encode() + b"\n")
    got = records(path)
    assert got[0].error.startswith("not UTF-8")
    assert got[1].error is None


def test_folder_is_walked_in_order_and_other_files_skipped(tmp_path):
    write_jsonl(tmp_path / "logs" / "b.jsonl", [chat_row("b")])
    write_jsonl(tmp_path / "logs" / "sub" / "a.ndjson", [chat_row("a")])
    (tmp_path / "logs" / "README.md").write_text("not logs")
    sources = discover([tmp_path / "logs"], "auto")
    assert [s.path.name for s in sources] == ["b.jsonl", "a.ndjson"]


def test_parquet_and_saved_hf_dataset(tmp_path):
    from datasets import Dataset

    rows = [chat_row("from arrow"), chat_row("second")]
    dataset = Dataset.from_list(rows)
    dataset.to_parquet(str(tmp_path / "a.parquet"))
    dataset.save_to_disk(str(tmp_path / "saved"))
    assert [r.data["messages"][0]["content"] for r in records(tmp_path / "a.parquet")] == ["from arrow", "second"]
    got = records(tmp_path / "saved", fmt="hf")
    assert got[1].data["messages"][0]["content"] == "second" and got[1].source.endswith("saved:2")


def test_missing_path_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        discover([tmp_path / "nope.jsonl"], "auto")


def test_empty_folder_is_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="no .jsonl"):
        discover([tmp_path / "empty"], "auto")


def test_fake_gzip_is_bad_input(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    path.write_text("plain text")
    with pytest.raises(BadInput, match="not a gzip file"):
        discover([path], "auto")
