"""Text from outside: a lone surrogate is found by its path and refused as bad input naming it; an unknown
name gets the nearest known one."""
import pytest

from mint.errors import BadInput
from mint.text import check_unicode, closest, lone_surrogate_at


def test_the_first_lone_surrogate_is_found_by_its_path():
    messages = [{"role": "user", "content": "fine 🙂"}, {"role": "user", "content": ["ok", "half \ud83d"]}]
    assert lone_surrogate_at(messages, "messages") == "messages[1].content[1]"
    assert lone_surrogate_at({"a": {"\udcff": "x"}}, "") == "a"             # a key names its parent
    assert lone_surrogate_at("\udcff", "TEXT") == "TEXT"
    assert lone_surrogate_at([{"content": "fine 🙂", "n": 3}, None], "messages") is None


def test_check_unicode_names_the_file_and_field():
    check_unicode({"text": "Zürich 🙂"}, "body")
    with pytest.raises(BadInput) as raised:
        check_unicode([{"function": {"name": "\ud800"}}], "", file="tools.json")
    assert str(raised.value).startswith("tools.json: [0].function.name: a lone surrogate")
    assert raised.value.field == "[0].function.name"


def test_closest_suggests_the_nearest_name_or_lists_them_all():
    assert closest("no_regresion", ["min", "no_regression"]) == " (did you mean no_regression?)"
    assert closest("zzz", ["min", "max"]) == ""
    assert closest("zzz", ["min", "max"], listing="expected one of") == " (expected one of min, max)"
    assert closest(None, ["Card"], listing="components:") == " (components: Card)"   # a missing name: no guess
    assert closest(3, ["3b", "x"]) == " (did you mean 3b?)"                            # YAML keys may be numbers
