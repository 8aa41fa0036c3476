import pytest

from mint.errors import BadInput
from mint.registry.refs import check_name, parse_ref


def test_reference_forms():
    assert parse_ref("coding:v7").version == 7
    assert parse_ref("coding:champion").alias == "champion"
    assert parse_ref("coding:previous").alias == "previous"
    assert parse_ref("3fa9c2").id_prefix == "3fa9c2"


@pytest.mark.parametrize("text", ["coding:v0", "coding:latest", "../x:v1", "co/ding:v1", "cod\x00ing:v1", "", "xyz",
                                  "abc", "Coding:v1"])
def test_bad_references_are_bad_input(text):
    with pytest.raises(BadInput):
        parse_ref(text)


@pytest.mark.parametrize("name", ["..", "a/b", "a\\b", "bad\nname", "", "x" * 65, "UPPER"])
def test_bad_names_are_refused(name):
    with pytest.raises(BadInput, match="invalid specialist name"):
        check_name(name)
