"""Scrub PII and secrets from text before anything is stored.

Each finding is replaced by a typed placeholder (``[EMAIL]``, ``[API_KEY]``...)
and counted per type. Patterns are checked most-specific first (a PEM block
or a JWT before the generic digit patterns) and only run when a cheap
trigger is present, so clean text costs a few substring checks.
"""
from __future__ import annotations

import functools
import ipaddress
import re
from collections import Counter
from typing import Callable

Replacer = Callable[[re.Match], str | None]   # None: a look-alike, keep the text


def _luhn_ok(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for i, ch in enumerate(digits):
        d = ord(ch) - 48
        if i % 2 == parity:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _credit_card(match: re.Match) -> str | None:
    digits = re.sub(r"[ -]", "", match.group(0))
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1 or not _luhn_ok(digits):
        return None
    return "[CREDIT_CARD]"


def _ipv6(match: re.Match) -> str | None:
    text = match.group(0)
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return None
    groups = [g for g in text.split(":") if g]
    # `ab::cd` (a C++/Rust path) and `1::2` (a Python slice) are valid IPv6 too: require a digit,
    # two groups and one group of 3+ hex digits, as real addresses (fe80::1, 2001:db8::7) have
    if len(groups) < 2 or not any(c.isdigit() for c in text) or max(map(len, groups)) < 3:
        return None
    return "[IP_ADDRESS]"


def _phone(match: re.Match) -> str | None:
    digits = sum(c.isdigit() for c in match.group(0))
    return "[PHONE]" if 7 <= digits <= 15 else None   # E.164 allows at most 15 digits


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"

# (type, trigger, pattern, replacer or None for the plain placeholder). A rule runs only when its
# trigger turned up in one cheap scan of the text, so clean text costs one regex pass.
_RULES: list[tuple[str, str, re.Pattern, Replacer | None]] = [
    ("PRIVATE_KEY", "pem", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
        re.S), None),
    ("JWT", "jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), None),
    ("API_KEY", "sk", re.compile(r"(?<![A-Za-z0-9])sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{20,}"), None),
    ("AWS_KEY", "aws", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), None),
    ("GITHUB_TOKEN", "gh", re.compile(
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"), None),
    ("SLACK_TOKEN", "slack", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), None),
    ("EMAIL", "at", re.compile(
        r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}\b"), None),
    ("CREDIT_CARD", "digits", re.compile(r"(?<![\d.-])\d(?:[ -]?\d){12,18}(?![\d.-]?\d)"), _credit_card),
    ("IP_ADDRESS", "dot", re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w]|\.\d)"), None),
    ("IP_ADDRESS", "colon", re.compile(
        r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|:)?(?![\w:])"), _ipv6),
    ("PHONE", "digits", re.compile(
        # +country code, then 2-5 groups: +1 415 555 0132, +44 20 7946 0958, +49-30-901820
        r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\w])"
        # North-American style with separators: (415) 555-0132, 415-555-0132, 415.555.0132
        r"|(?<![\w.-])(?:\(\d{3}\)\s?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\w]|[.-]\d)"), _phone),
]

# Cheap checks first: substring tests run at memchr speed, and the digit patterns only run on
# text with seven digits close together (the least a phone or card number has).
_LITERALS = (("pem", "-----BEGIN"), ("jwt", "eyJ"), ("sk", "sk-"), ("aws", "AKIA"), ("aws", "ASIA"),
             ("gh", "ghp_"), ("gh", "gho_"), ("gh", "ghu_"), ("gh", "ghs_"), ("gh", "ghr_"), ("gh", "github_pat_"),
             ("slack", "xox"), ("at", "@"), ("colon", ":"))
_DIGIT = re.compile(r"\d")
_DIGIT_DOT = re.compile(r"\d\.\d")
_SEVEN_DIGITS = re.compile(r"\d(?:[^\d\n]{0,3}\d){6}")

PLACEHOLDER_TYPES = tuple(dict.fromkeys(rule[0] for rule in _RULES))


def _substitute(kind: str, replacer: Replacer | None, counts: Counter, match: re.Match) -> str:
    result = f"[{kind}]" if replacer is None else replacer(match)
    if result is None:
        return match.group(0)
    counts[kind] += 1
    return result


def scrub_text(text: str, counts: Counter) -> str:
    """``text`` with every finding replaced by its placeholder; ``counts`` gets one per finding."""
    present = {name for name, literal in _LITERALS if literal in text}
    if _DIGIT.search(text):
        if _DIGIT_DOT.search(text):
            present.add("dot")
        if _SEVEN_DIGITS.search(text):
            present.add("digits")
    if not present:
        return text
    for kind, trigger, pattern, replacer in _RULES:
        if trigger in present and pattern.search(text) is not None:
            text = pattern.sub(functools.partial(_substitute, kind, replacer, counts), text)
    return text

def scrub_value(value, counts: Counter):
    """Scrub every string inside a JSON-like value (tool-call arguments, tool results)."""
    if isinstance(value, str):
        return scrub_text(value, counts)
    if isinstance(value, list):
        return [scrub_value(v, counts) for v in value]
    if isinstance(value, dict):
        return {k: scrub_value(v, counts) for k, v in value.items()}
    return value
