"""Names end where they seem to (no trailing newline slips through `$`); plugins leave sys.path as it was."""
import sys

import pytest

from mint.errors import BadInput


@pytest.mark.parametrize("name", ["prod\n", "chat\n"])
def test_a_name_with_a_trailing_newline_is_refused(name):
    from mint.data.datasets import check_name as check_dataset
    from mint.registry.refs import check_name as check_specialist

    with pytest.raises(BadInput):
        check_dataset(name)
    with pytest.raises(BadInput):
        check_specialist(name)


def test_a_project_specialist_with_a_trailing_newline_is_refused(tmp_path):
    from mint.project import load_project

    (tmp_path / "mint.yaml").write_text('specialists:\n  "chat\\n": {}\n')
    with pytest.raises(BadInput, match="specialist name"):
        load_project(tmp_path / "mint.yaml")


def test_load_object_leaves_sys_path_as_it_was(tmp_path, monkeypatch):
    from mint.plugins import load_object

    (tmp_path / "myrewards.py").write_text("def score(x):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    assert load_object("myrewards:score", what="reward", field="reward")("x") == 1.0
    assert sys.path == before
