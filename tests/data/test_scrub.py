import json
from collections import Counter
from pathlib import Path

import pytest

from mint.data.scrub import scrub_text, scrub_value


def scrub(text):
    counts = Counter()
    return scrub_text(text, counts), dict(counts)


@pytest.mark.parametrize("secret, kind", [
    ("jane.doe+news@mail.example.co.uk", "EMAIL"),
    ("+1 415 555 0132", "PHONE"),
    ("(415) 555-0132", "PHONE"),
    ("415.555.0132", "PHONE"),
    ("+44 20 7946 0958", "PHONE"),
    ("4111 1111 1111 1111", "CREDIT_CARD"),
    ("5500-0000-0000-0004", "CREDIT_CARD"),
    ("378282246310005", "CREDIT_CARD"),
    ("192.168.10.20", "IP_ADDRESS"),
    ("2001:db8:85a3::8a2e:370:7334", "IP_ADDRESS"),
    ("fe80::1ff:fe23:4567:890a", "IP_ADDRESS"),
    ("sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "API_KEY"),
    ("sk-abcdefghijklmnopqrstuvwxyz0123456789", "API_KEY"),
    ("AKIAIOSFODNN7EXAMPLE", "AWS_KEY"),
    ("ghp_" + "A1b2C3d4E5" * 4, "GITHUB_TOKEN"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "GITHUB_TOKEN"),
    ("xoxb-2401234567-abcdefGHIJKL", "SLACK_TOKEN"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "JWT"),
])
def test_each_secret_type_is_replaced_by_its_placeholder(secret, kind):
    text, counts = scrub(f"before {secret} after")
    assert text == f"before [{kind}] after"
    assert counts == {kind: 1}


def test_pem_private_key_block_is_replaced_whole():
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc+/=\n-----END RSA PRIVATE KEY-----"
    text, counts = scrub(f"key:\n{pem}\nthanks")
    assert text == "key:\n[PRIVATE_KEY]\nthanks"
    assert counts == {"PRIVATE_KEY": 1}


@pytest.mark.parametrize("lookalike", [
    "order 4111 1111 1111 1112",          # fails the Luhn check
    "0000 0000 0000 0000",                # one repeated digit
    "released on 2026-11-29 at 12:30:45",
    "pi is 3.14159 and e is 2.71828",
    "version v1.2.3 and 999.1.1.1",
    "std::vector<int> and ab::cd",
    "evens = l[::2]; odds = l[1::2]",
    "call me maybe 12345",
    "id 1234567890",
    "user@localhost",
    "sk-short",
    "the skeleton key",
    "AKIA is a prefix",
    "price +5 10",
    "a ghp_ prefix alone",
])
def test_lookalikes_are_kept(lookalike):
    assert scrub(lookalike) == (lookalike, {})


def test_counts_every_finding_in_one_text():
    text, counts = scrub("a@b.io, c@d.io and 10.0.0.1")
    assert text == "[EMAIL], [EMAIL] and [IP_ADDRESS]"
    assert counts == {"EMAIL": 2, "IP_ADDRESS": 1}


def test_scrub_value_reaches_nested_tool_arguments():
    counts = Counter()
    value = scrub_value({"to": ["x@y.com"], "n": 3, "meta": {"ip": "8.8.8.8"}}, counts)
    assert value == {"to": ["[EMAIL]"], "n": 3, "meta": {"ip": "[IP_ADDRESS]"}}
    assert counts == {"EMAIL": 1, "IP_ADDRESS": 1}


# --- the labelled set: recall and precision per type ---------------------------------------------

LABELLED = Path(__file__).with_name("pii_labelled.jsonl")


def _scores() -> dict[str, dict[str, int]]:
    """Per type: true positives (the value is gone and its placeholder is there), misses, false alarms."""
    scores: dict[str, dict[str, int]] = {}
    for line in LABELLED.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        counts: Counter = Counter()
        scrubbed = scrub_text(item["text"], counts)
        found: Counter = Counter()
        for pii in item["pii"]:
            score = scores.setdefault(pii["type"], {"tp": 0, "fn": 0, "fp": 0})
            if pii["value"] not in scrubbed and f"[{pii['type']}]" in scrubbed:
                score["tp"] += 1
                found[pii["type"]] += 1
            else:
                score["fn"] += 1
        for kind, n in counts.items():
            scores.setdefault(kind, {"tp": 0, "fn": 0, "fp": 0})["fp"] += max(0, n - found[kind])
    return scores


def test_the_labelled_set_is_big_enough_and_has_look_alikes():
    items = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines()]
    assert len(items) >= 300 and sum(1 for i in items if not i["pii"]) >= 100
    kinds = Counter(p["type"] for i in items for p in i["pii"])
    assert {"PHONE", "SSN", "IBAN", "TOKEN", "API_KEY", "EMAIL", "CREDIT_CARD"} <= set(kinds)
    assert min(kinds.values()) >= 5


def test_recall_and_precision_per_type_on_the_labelled_set():
    scores = _scores()
    report = {kind: (s["tp"] / max(1, s["tp"] + s["fn"]), s["tp"] / max(1, s["tp"] + s["fp"]))
              for kind, s in scores.items()}
    low = {kind: r for kind, r in report.items() if r[0] < 0.99 or r[1] < 0.95}
    assert not low, f"(recall, precision) below 0.99 / 0.95: {low}"


@pytest.mark.parametrize("text, kind", [
    ("4155550132", "PHONE"), ("020 7946 0958", "PHONE"), ("07700 900123", "PHONE"), ("123-45-6789", "SSN"),
    ("GB82 WEST 1234 5698 7654 32", "IBAN"), ("Bearer abcDEF123456ghiJKL789", "TOKEN"),
    ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "API_KEY"), ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "API_KEY"),
    ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "API_KEY")])
def test_the_numbers_and_secrets_the_issue_names_are_caught(text, kind):
    scrubbed, counts = scrub(f"note: {text} end")
    assert text not in scrubbed and counts == {kind: 1}


@pytest.mark.parametrize("text", ["order 4155550132", "v1.24.3", "1732874400", "2026-11-29 10:00:00",
                                  "3f786850e387550fdab836ed7e6dc881de23001b", "GB00 WEST 1234 5698 7654 32",
                                  "987-65-4321", "the bearer of bad news", "hf_hub_download"])
def test_look_alikes_survive(text):
    assert scrub(text) == (text, {})


@pytest.mark.parametrize("text", ["Compute 355909190063-746 step by step.", "What is 960397912423686 + 17?",
                                  "Let x = 12 * 960397912423686; find x mod 7.",
                                  "Evaluate (4155550132 - 3) / 2", "960397912423686 divided by 3"])
def test_numbers_in_arithmetic_are_not_cards_or_phones(text):
    counts = Counter()
    assert scrub_text(text, counts) == text and not counts


@pytest.mark.parametrize("text", ["my card is 4111 1111 1111 1111, thanks", "card: 4111-1111-1111-1111",
                                  "amex 3782 822463 10005 please"])
def test_cards_written_as_cards_are_still_caught(text):
    counts = Counter()
    assert "[CREDIT_CARD]" in scrub_text(text, counts) and counts == {"CREDIT_CARD": 1}


def test_the_data_guide_lists_every_scrubbed_type():
    from pathlib import Path

    from mint.data.scrub import PLACEHOLDER_TYPES

    guide = (Path(__file__).parents[2] / "docs" / "data.md").read_text()   # the README links to it
    assert [kind for kind in PLACEHOLDER_TYPES if f"[{kind}]" not in guide] == []
