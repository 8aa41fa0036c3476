"""JSON Lines: a bad line names its file and line; a torn line can be passed over; writes are whole."""
import pytest

from mint.errors import BadInput
from mint.jsonl import read_jsonl, write_jsonl


def test_rows_come_with_their_line_numbers_and_blank_lines_are_passed_over(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n["b", "ü"]\n')
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (3, ["b", "ü"])]


def test_a_line_that_is_not_json_is_bad_input_naming_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(BadInput) as raised:
        list(read_jsonl(path))
    assert (raised.value.file, raised.value.line) == (str(path), 2)
    assert str(raised.value).startswith(f"{path}:2: not a JSON line")


def test_a_torn_line_is_passed_over_when_asked(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2, "text": "\xc3')     # killed mid-character
    assert list(read_jsonl(path, torn="skip")) == [(1, {"step": 1})]


def test_write_replaces_the_file_in_one_rename(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("old\n")
    write_jsonl(path, [{"a": "ü"}, [1, 2]])
    assert path.read_text(encoding="utf-8") == '{"a": "ü"}\n[1, 2]\n'
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]     # no temp file left behind
