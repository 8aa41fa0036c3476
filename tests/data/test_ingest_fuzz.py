"""Ingest against inputs nobody here wrote: whatever the bytes, the run finishes and counts every record."""
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mint.data.ingest import ingest

# text includes lone surrogates (json.dumps writes them as \\udXXX escapes, as truncated emoji arrive)
_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=12)
_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | _text
_deep = st.sampled_from([10, 5_000, 30_000]).map(lambda n: {"deep": n})
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                             max_size=4), max_leaves=12)
_keys = st.sampled_from(["messages", "conversations", "role", "content", "from", "value", "tool_calls", "function",
                         "arguments", "name", "feedback", "rating", "thumbs", "label", "score", "correction", "ts",
                         "session", "request", "response", "choices", "message", "error", "weight", "type", "text",
                         "tool_use", "tool_result", "input", "id", "served_by", "specialist", "finish_reason"])
_shaped = st.recursive(_scalars | _keys, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    _keys, inner, max_size=5), max_leaves=20)

# near-valid episodes whose every field is fuzzed: these reach normalizing, scrubbing and writing
_part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "refusal", "input_audio", "file",
                                                        "tool_use", "tool_result", "thinking", "nope"])},
                              optional={"text": _scalars, "refusal": _scalars, "thinking": _scalars, "name": _scalars,
                                        "input": _json, "content": _json, "id": _scalars, "tool_use_id": _scalars})
_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "system", "gpt", "x"]),
                                  "content": _text | st.lists(_part, max_size=3) | _json},
                                 optional={"weight": _scalars, "name": _scalars, "reasoning_content": _scalars,
                                           "finish_reason": _scalars, "tool_calls": _json})
_episodic = st.fixed_dictionaries({"messages": st.lists(_message, min_size=1, max_size=4)},
                                  optional={"session": _scalars, "ts": _scalars, "feedback": _json,
                                            "correction": _scalars, "label": _scalars, "score": _scalars,
                                            "served_by": _scalars, "id": _scalars, "tools": _json})


def _line(value) -> bytes:
    if isinstance(value, dict) and "deep" in value:   # nesting past what the parser can recurse into
        return ('{"messages": [{"role": "user", "content": "x"}], "x": ' + "[" * value["deep"] + "]" * value["deep"]
                + "}").encode()
    return json.dumps(value).encode() if not isinstance(value, bytes) else value


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_episodic | _shaped | _json | st.binary(max_size=40) | _deep, min_size=1, max_size=8))
def test_any_jsonl_input_finishes_and_every_record_is_counted(tmp_path_factory, rows):
    from mint.project import DEFAULT_PROJECT
    from mint.workspace import workspace

    tmp = tmp_path_factory.mktemp("fuzz")
    lines = [_line(r).replace(b"\n", b" ") for r in rows]
    path = tmp / "a.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = ingest(workspace(tmp / "home"), [path], dataset="d", project=DEFAULT_PROJECT, workers=0)
    stats = result.sources[0]
    assert stats.read == stats.kept + stats.duplicate + stats.quarantined
    if b"\x00" not in path.read_bytes():   # with NULs and no BOM the file is reported once as binary
        assert stats.read == sum(1 for line in lines if line.decode("utf-8", "replace").strip())


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_episodic | _shaped | _json, min_size=1, max_size=6), noise=st.text(alphabet="[]{},\"\\ :x", max_size=12))
def test_any_json_array_input_finishes(tmp_path_factory, rows, noise):
    from mint.project import DEFAULT_PROJECT
    from mint.workspace import workspace

    tmp = tmp_path_factory.mktemp("fuzz")
    path = tmp / "a.json"
    path.write_text("[" + ",".join(json.dumps(r) for r in rows) + "," + noise + "]")
    result = ingest(workspace(tmp / "home"), [path], dataset="d", project=DEFAULT_PROJECT, workers=0)
    stats = result.sources[0]
    assert stats.read == stats.kept + stats.duplicate + stats.quarantined >= len(rows)
