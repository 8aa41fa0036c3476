"""The loop's serve step: requests sent through a real `mint serve` on loopback, each turn logged as served."""
from __future__ import annotations

import json

import pytest

from mint.errors import BadInput
from mint.project import DEFAULT_PROJECT, Project

TINY_PROJECT = Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)


def test_each_request_is_answered_over_http_and_logged_as_a_served_turn(ws, crown, tiny_loras, tmp_path):
    from mint.serve.replay import serve_requests
    from mint.mol.turnlog import scan_turns

    crown("genui", tiny_loras["genui"])
    requests = tmp_path / "requests.jsonl"
    requests.write_text("\n".join(json.dumps(r) for r in [
        {"messages": [{"role": "user", "content": "Make a signup form with email and password fields."}]},
        {"prompt": "Show a product card for the Onyx monitor with a buy button."},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}]) + "\n")
    result = serve_requests(ws, TINY_PROJECT, requests, base="tiny-random", clients=3, max_tokens=8)
    assert (result.requests, result.served, result.failed) == (3, 3, 0), result.failures
    turns, _skipped = scan_turns(ws)
    assert len(turns) == 3
    users = sorted(t["messages"][-2]["content"] for t in turns)
    assert users == ["Make a signup form with email and password fields.",
                     "Show a product card for the Onyx monitor with a buy button.", "hi"]
    assert all(t["messages"][-1]["role"] == "assistant" for t in turns)    # the answer the server generated
    assert sum(result.by_revision.values()) == 3
    genui = [t for t in turns if t["specialist"] == "genui"]
    assert genui and all(t["served_by"] == "genui:v1" for t in genui)     # the champion answered its turns


def test_more_clients_than_the_servers_per_key_default_are_all_served(ws, tmp_path):
    """The replay is one caller sending ``clients`` turns at once: none is refused for its key's share."""
    from mint.serve.admission import Limits
    from mint.serve.replay import serve_requests

    clients = Limits().max_per_key + 8
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"prompt": f"Say hello number {i}."}) + "\n" for i in range(clients)))
    result = serve_requests(ws, TINY_PROJECT, requests, base="tiny-random", clients=clients, max_tokens=4)
    assert (result.served, result.failed) == (clients, 0), result.failures


def test_each_request_answered_is_told_to_the_progress_callback(ws, tmp_path):
    from mint.serve.replay import serve_requests

    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"prompt": f"Say hello number {i}."}) + "\n" for i in range(3)))
    heard = []
    serve_requests(ws, TINY_PROJECT, requests, base="tiny-random", clients=2, max_tokens=4,
                   progress=lambda what, done, total: heard.append((what, done, total)))
    assert heard == [("requests answered", 1, 3), ("requests answered", 2, 3), ("requests answered", 3, 3)]


def test_a_bad_request_line_names_its_file_line_and_field_before_anything_loads(ws, tmp_path):
    from mint.serve.replay import serve_requests

    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"prompt": "fine"}\n{"messages": []}\n')
    with pytest.raises(BadInput) as info:
        serve_requests(ws, TINY_PROJECT, requests, base="tiny-random")
    assert (info.value.line, info.value.field) == (2, "messages")
    assert str(requests) in str(info.value)
