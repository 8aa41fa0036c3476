"""Reliability suite 5, fast form: the scrubber's recall and precision on the labelled PII set written for it
(dev: tuned on; held-out: measured only). The long form, with per-type tables, is scripts/reliability_pii.py."""
from collections import Counter

import pytest

from mint.data.scrub import scrub_text
from tests.reliability.scripts import load_script


def scrub(text):
    counts = Counter()
    return scrub_text(text, counts), dict(counts)


def test_the_labelled_set_has_500_strings_of_every_type_and_look_alikes():
    suite = load_script("pii")
    items = suite.read_set(suite.SETS["dev"]) + suite.read_set(suite.SETS["heldout"])
    kinds = Counter(p["type"] for i in items for p in i["pii"])
    assert len(items) >= 500 and sum(1 for i in items if not i["pii"]) >= 250
    assert {"EMAIL", "PHONE", "CREDIT_CARD", "IBAN", "SSN", "NI_NUMBER", "IP_ADDRESS", "API_KEY", "AWS_KEY",
            "GITHUB_TOKEN", "JWT", "PRIVATE_KEY", "PASSWORD", "TOKEN"} <= set(kinds)


@pytest.mark.parametrize("split", ["dev", "heldout"])
def test_recall_and_precision_meet_the_goals(split):
    suite = load_script("pii")
    scores, mistakes = suite.score(suite.read_set(suite.SETS[split]))
    recall, precision = suite.rates(sum(scores.values(), Counter()))
    assert recall >= suite.RECALL_GOAL and precision >= suite.PRECISION_GOAL, mistakes


@pytest.mark.parametrize("text, kind", [
    ("NI number AB 12 34 56 C", "NI_NUMBER"),
    ("my NINO is JX204118A", "NI_NUMBER"),
    ("sk-proj-M28Uc_cn3RRj1y-958vIMYHGNbf66TD4A8QsX3goTbGgNW", "API_KEY"),
    ("tel: +55 11 94811-0045", "PHONE"),          # a Luhn-valid digit run after + is a phone, not a card
    ("Phone 03-1282-8081", "PHONE"),              # Tokyo, national format
    ("ring 030 12345678", "PHONE"),               # Berlin, national format
    ("ring (11) 91723-2166", "PHONE"),            # São Paulo, area code in parentheses
])
def test_formats_the_suite_found_missing_are_caught(text, kind):
    scrubbed, counts = scrub(text)
    assert counts == {kind: 1}, scrubbed


def test_a_password_in_a_url_goes_and_the_rest_of_the_url_stays():
    scrubbed, counts = scrub("DATABASE_URL=postgres://deploy:p@55w0rd75@db.example.com:5432/app")
    assert scrubbed == "DATABASE_URL=postgres://deploy:[PASSWORD]@db.example.com:5432/app"
    assert counts == {"PASSWORD": 1}


@pytest.mark.parametrize("text", ["2^34 = 17179869184", "the sk-learn-compatible-transformer-pipeline-name",
                                  "NI prefixes GB 12 34 56 A are never issued", "see https://example.com/a:b@c"])
def test_look_alikes_the_suite_found_stay(text):
    assert scrub(text) == (text, {})
