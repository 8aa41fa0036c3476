import gzip
import json

import pytest

from mint.data.sources import discover, read_source
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


# --- encodings ----------------------------------------------------------------------

@pytest.mark.parametrize("encoding,bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                          ("utf-16-be", b"\xfe\xff"), ("utf-32-le", b"\xff\xfe\x00\x00"),
                                          ("utf-32-be", b"\x00\x00\xfe\xff")])
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_byte_order_mark_is_decoded_not_quarantined(tmp_path, encoding, bom, suffix):
    rows = [chat_row("héllo ☃ \U0001f600"), chat_row("second")]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"
    path = tmp_path / f"a{suffix}"
    path.write_bytes(bom + text.encode(encoding))
    got = records(path)
    assert [r.error for r in got] == [None, None]
    assert [r.data["messages"][0]["content"] for r in got] == ["héllo ☃ \U0001f600", "second"]
    assert got[1].source.endswith(":2")


def test_utf16_without_a_byte_order_mark_is_recognised(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes((json.dumps(chat_row("one")) + "\n").encode("utf-16-le"))
    assert records(path)[0].data["messages"][0]["content"] == "one"


def test_a_binary_file_is_reported_once_as_undecodable(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(bytes(range(256)) * 40 + b"\n" * 50)
    (got,) = records(path)
    assert "not text" in got.error and got.source.endswith(":1")


# --- JSON arrays ----------------------------------------------------------------------

def test_an_invalid_value_in_a_json_array_does_not_drop_the_values_after_it(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[\n{"messages": [{"role": "user", "content": "ok"}]},\n {"messages": oops},\n'
                    ' {"x": [1, 2}\n,\n {"messages": [{"role": "user", "content": "after"}]}\n]\n')
    got = records(path)
    assert [r.error is None for r in got] == [True, False, False, True]
    assert got[3].data["messages"][0]["content"] == "after" and got[3].source.endswith(":6")
    assert got[1].source.endswith(":3") and got[1].error.startswith("invalid JSON")


def test_an_oversized_value_in_a_json_array_is_reported_and_the_rest_kept(tmp_path):
    path = tmp_path / "a.json"
    rows = [chat_row("small"), chat_row("x" * 3_000_000), chat_row("after")]
    path.write_text(json.dumps(rows))
    got = records(path, cap=1_000_000)
    assert [r.error is None for r in got] == [True, False, True]
    assert "size cap" in got[1].error and "3,000" in got[1].error
    assert got[2].data["messages"][0]["content"] == "after"


@pytest.mark.parametrize("padding", [0, 1, 7, 1000, (1 << 20) - 40, (1 << 20) - 3])
def test_whether_a_record_is_over_the_cap_does_not_depend_on_where_a_read_chunk_ends(tmp_path, padding):
    path = tmp_path / "a.json"
    near_cap = json.dumps(chat_row("y" * (1500 - 50)))
    rows = [near_cap, json.dumps(chat_row("z" * 2500)), json.dumps(chat_row("end"))]
    path.write_text("[" + " " * padding + ",".join(rows) + "]")   # whitespace moves the chunk boundaries
    got = records(path, cap=len(near_cap.encode()))
    assert [r.error is None for r in got] == [True, False, True]


def test_strings_with_brackets_quotes_and_escapes_do_not_confuse_the_splitter(tmp_path):
    rows = [chat_row('a "quoted" ] } [ { , \\ back\\slash \\"', 'x\\'), chat_row("two"), 3, "plain string"]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(rows))
    assert [r.data for r in records(path)] == rows


# --- odd values -------------------------------------------------------------------------

def test_a_deeply_nested_line_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps(chat_row("next")) + "\n")
    got = records(path)
    assert "nested too deeply" in got[0].error and got[1].error is None


def test_a_deeply_nested_value_in_a_json_file_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("[" + "[" * 100_000 + "]" * 100_000 + ', {"a": 1}]')
    got = records(path)
    assert "nested too deeply" in got[0].error and got[1].data == {"a": 1}


# --- compression and folders ----------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".jsonl.zst", ".jsonl.bz2", ".jsonl.xz", ".json.zst", ".jsonl.1", ".jsonl.2.gz"])
def test_compressed_and_rotated_logs_in_a_folder_are_read(tmp_path, suffix):
    import bz2
    import lzma

    import zstandard

    data = (json.dumps(chat_row("packed")) + "\n").encode()
    packers = {".zst": zstandard.ZstdCompressor().compress, ".bz2": bz2.compress, ".xz": lzma.compress,
               ".gz": gzip.compress}
    pack = packers.get("." + suffix.rsplit(".", 1)[1], lambda b: b)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / f"app{suffix}").write_bytes(pack(data))
    (got,) = records(tmp_path / "logs")
    assert got.data["messages"][0]["content"] == "packed"


def test_files_a_folder_walk_skips_are_listed(tmp_path):
    write_jsonl(tmp_path / "logs" / "b.jsonl", [chat_row("b")])
    (tmp_path / "logs" / "notes.txt").write_text("not logs")
    (tmp_path / "logs" / "app.log").write_text("x")
    skipped: list = []
    discover([tmp_path / "logs"], "auto", skipped=skipped)
    assert sorted(p.rsplit("/", 1)[1] for p in skipped) == ["app.log", "notes.txt"]


def test_a_corrupt_zstd_file_is_bad_input(tmp_path):
    path = tmp_path / "a.jsonl.zst"
    path.write_text("plain text")
    with pytest.raises(BadInput, match="not a zstd file"):
        discover([path], "auto")


# --- Parquet ---------------------------------------------------------------------------

def test_arrow_datetime_decimal_and_bytes_values_become_json_or_a_reason(tmp_path):
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "messages": [[{"role": "user", "content": "hi"}]] * 3,
        "ts": [datetime.datetime(2026, 11, 29, 10, 0, 0)] * 3,
        "cost": pa.array([decimal.Decimal("1.25")] * 3, pa.decimal128(5, 2)),
        "blob": [b"text bytes", b"\xff\xfe\x00binary", None],
    })
    pq.write_table(table, tmp_path / "a.parquet")
    got = records(tmp_path / "a.parquet")
    assert got[0].error is None and got[0].data["ts"] == "2026-11-29T10:00:00Z"
    assert got[0].data["cost"] == 1.25 and got[0].data["blob"] == "text bytes"
    assert got[1].error == "blob: a binary value (9 bytes) that is not UTF-8 text" and got[1].source.endswith(":2")
    assert got[2].error is None


def test_a_corrupt_parquet_row_group_is_reported_and_the_other_groups_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [chat_row(f"row {i} " + "w" * 200) for i in range(30)]
    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=10, compression="snappy")
    meta = pq.ParquetFile(path).metadata
    start = meta.row_group(1).column(0).data_page_offset
    blob = bytearray(path.read_bytes())
    blob[start + 20:start + 400] = b"\x00" * 380   # wreck the middle row group's first page
    path.write_bytes(bytes(blob))
    got = records(path)
    good = [r for r in got if r.error is None]
    bad = [r for r in got if r.error]
    assert len(good) == 20 and [r.source.rsplit(":", 1)[1] for r in good][10] == "21"
    assert len(bad) == 1 and "rows 11-20" in bad[0].error


def test_an_unterminated_string_is_named_once_with_its_column(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "cut\n')
    (got,) = records(path)
    assert got.error == "invalid JSON: Unterminated string starting at column 43"
