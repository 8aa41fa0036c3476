"""Scrub PII and secrets from text before anything is stored.

Each finding is replaced by a typed placeholder (``[EMAIL]``, ``[API_KEY]``...)
and counted per type. Patterns are checked most-specific first (a PEM block
or a JWT before the generic digit patterns) and only run when a cheap
trigger is present, so clean text costs a few substring checks.

Maintained rules where they exist: phone numbers are confirmed by Google's
libphonenumber metadata (the ``phonenumbers`` package) for international,
US/Canadian and UK numbers; secret shapes follow detect-secrets' and
gitleaks' plugins (Stripe, Hugging Face, Google API keys, bearer tokens);
card numbers are Luhn-checked, IBANs mod-97-checked, SSNs checked against
the numbers the SSA never issues. A look-alike (an order number, a version, a
timestamp, a hash) fails these checks and is kept.
"""
from __future__ import annotations

import functools
import ipaddress
import re
import string
from collections import Counter
from dataclasses import replace
from typing import Callable

from mint.data.schema import Episode, Feedback, Message, Preference

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


# An operator (or its word) between a number and another: the number is an operand of arithmetic, which
# maths prompts are full of, not a card or a phone.
_OPERATOR = r"(?:[-+*/×÷^=<>%]|\*\*|plus|minus|times|over|mod(?:ulo)?|divided by|multiplied by)"
_OPERAND_BEFORE = re.compile(rf"(?i)(?:[\d)]|\b[a-z])\s*{_OPERATOR}\s*\(?\s*$")
_OPERAND_AFTER = re.compile(rf"(?i)^\s*\)?\s*{_OPERATOR}\s*[\d(]")


def in_arithmetic(match: re.Match) -> bool:
    """Whether the match is an operand: an operator and another operand before or after it."""
    text, start, end = match.string, match.start(), match.end()
    return bool(_OPERAND_BEFORE.search(text, max(0, start - 24), start)
                or _OPERAND_AFTER.match(text[end:end + 24]))


def _card_groups(text: str) -> bool:
    """Whether the separators of a card number fall where cards print them: groups of four (the last
    shorter), or American Express's and Diners' 4-6-5 and 4-6-4; ``355909190063-746`` is a subtraction."""
    groups = re.split(r"[ -]", text)
    if len(groups) == 1:
        return True
    lengths = [len(g) for g in groups]
    return all(n == 4 for n in lengths[:-1]) and 1 <= lengths[-1] <= 4 or lengths in ([4, 6, 5], [4, 6, 4])


def _credit_card(match: re.Match) -> str | None:
    digits = re.sub(r"[ -]", "", match.group(0))
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1 or not _luhn_ok(digits):
        return None
    if not _card_groups(match.group(0)) or in_arithmetic(match):
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


# Numbers that look like phones but are named as something else just before them, or are the operand or
# result of arithmetic ("2^36 = 68719476736").
_NOT_A_PHONE = re.compile(r"(?i)(?:(?:order|invoice|tracking|ticket|ref|reference|id|sku|pid|build|version|serial|"
                          r"isbn|transaction|txn|case|po)\W{0,3}|[\d)]\s*[=*/^+×÷-]\s*)$")
_NANP = re.compile(r"1?[2-9]\d{2}[2-9]\d{6}")   # area code and exchange never start with 0 or 1


def _phone(match: re.Match) -> str | None:
    text = match.group(0)
    if len(text) < 7 or _DATE.match(text) or sum(c.isdigit() for c in text) < 7 \
            or _NOT_A_PHONE.search(match.string, max(0, match.start() - 24), match.start()) or in_arithmetic(match):
        return None
    # the candidate may have run on into a following number ("415 555 0132 2 times"): try it whole,
    # then without its last groups
    ends = [len(text)] + [m.start() for m in reversed(list(_GROUP_BREAK.finditer(text)))]
    for end in ends:
        if _is_phone(text[:end]):
            return "[PHONE]" + text[end:]
    return None


_DATE = re.compile(r"(?:19|20)\d\d[-./](?:0?[1-9]|1[0-2])[-./]\d\d?$")
_GROUP_BREAK = re.compile(r"[ .-]+(?=\(?\d)")


def _is_phone(text: str) -> bool:
    import phonenumbers   # imported on the first candidate: most text never has one

    digits = re.sub(r"\D", "", text)
    if not 7 <= len(digits) <= 15:
        return False
    stripped = text.lstrip("(")
    if stripped.startswith(("+", "00")):
        region = "GB" if stripped.startswith("00") else None   # 00 is the international prefix in Europe
    elif stripped.startswith("0"):
        region = "GB"
    elif _NANP.fullmatch(digits):
        region = "US"
    elif text.startswith("("):   # an area code in parentheses without a trunk 0: "(11) 91723-2166"
        return any(_valid_in(text, other) for other in _NATIONAL_REGIONS)
    else:
        return False   # cheap shape checks first: parsing costs ~100 µs
    if _valid_in(text, region):
        return True
    try:
        number = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException:
        return False
    # UK numbers reserved for drama (07700 900xxx, 020 7946 0xxx) are possible, not valid: a log that
    # holds one was written by a person, so a UK national number of the right length counts
    if region == "GB" and stripped.startswith("0") and len(digits) == 11 and phonenumbers.is_possible_number(number):
        return True
    # a national number of another country that dials a trunk 0 first (030 ... in Berlin, 03-... in Tokyo):
    # valid in one of the most-populous such countries' numbering plans
    return region == "GB" and any(_valid_in(text, other) for other in _NATIONAL_REGIONS)


# Countries whose national numbers are written with a leading trunk 0 (or an area code in parentheses), by
# population of their internet users; GB and the NANP are tried first above.
_NATIONAL_REGIONS = ("IN", "BR", "JP", "DE", "FR", "TR", "IT", "AU", "NL", "ZA", "AR", "PH", "BE", "AT", "CH",
                     "NZ", "IE", "SE", "PL", "IL")


def _valid_in(text: str, region: str | None) -> bool:
    import phonenumbers

    try:
        return phonenumbers.is_valid_number(phonenumbers.parse(text, region))
    except phonenumbers.NumberParseException:
        return False


def _ssn(match: re.Match) -> str | None:
    area, group, serial = match.group("area"), match.group("group"), match.group("serial")
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return None   # never issued (SSA), so a look-alike
    return "[SSN]"


_IBAN_LETTERS = {c: str(ord(c) - 55) for c in string.ascii_uppercase}


def _iban(match: re.Match) -> str | None:
    compact = match.group(0).replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return None
    rearranged = compact[4:] + compact[:4]
    number = "".join(_IBAN_LETTERS.get(c, c) for c in rearranged)
    return "[IBAN]" if int(number) % 97 == 1 else None


def _random_key(match: re.Match) -> str | None:
    tail = match.group(0)[3:]
    return "[API_KEY]" if any(c.isdigit() for c in tail) and any(c.isalpha() for c in tail) else None


def _url_password(match: re.Match) -> str | None:
    return match.group("prefix") + "[PASSWORD]@"


def _bearer(match: re.Match) -> str | None:
    token = match.group("token")
    if not (any(c.isdigit() for c in token) or (any(c.isupper() for c in token) and any(c.islower() for c in token))):
        return None   # "bearer of bad news-and-more": a word, not a credential
    return match.group("scheme") + "[TOKEN]"


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"

# (type, trigger, pattern, replacer or None for the plain placeholder). A rule runs only when its
# trigger turned up in one cheap scan of the text, so clean text costs one regex pass.
_RULES: list[tuple[str, str, re.Pattern, Replacer | None]] = [
    ("PRIVATE_KEY", "pem", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
        re.S), None),
    ("JWT", "jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), None),
    # OpenAI keys: sk-, sk-proj-, sk-svcacct-... then a random tail that holds _ and - too; a long kebab-case
    # word after sk- (no digit) is not a key
    ("API_KEY", "sk", re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])"), _random_key),
    # Stripe secret and restricted keys, live and test (detect-secrets' StripeDetector, widened for the
    # longer keys Stripe issues now)
    ("API_KEY", "stripe", re.compile(r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"), None),
    ("API_KEY", "hf", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])"), None),   # Hugging Face
    ("API_KEY", "google", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])"), None),
    ("AWS_KEY", "aws", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), None),
    ("GITHUB_TOKEN", "gh", re.compile(
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"), None),
    ("SLACK_TOKEN", "slack", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), None),
    ("TOKEN", "bearer", re.compile(r"(?P<scheme>\b[Bb]earer\s+)(?P<token>[A-Za-z0-9\-._~+/]{16,}=*)(?![\w\-.~+/=])"),
     _bearer),
    # scheme://user:password@host: only the password goes (the e-mail rule would take password@host)
    ("PASSWORD", "url", re.compile(r"(?P<prefix>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?P<password>[^\s/]+)@"
                                   r"(?=[A-Za-z0-9\[])"), _url_password),
    ("EMAIL", "at", re.compile(
        r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}\b"), None),
    ("IBAN", "digits", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"), _iban),
    ("CREDIT_CARD", "digits", re.compile(r"(?<![\d.+-])\d(?:[ -]?\d){12,18}(?![\d.-]?\d)"), _credit_card),
    # UK National Insurance numbers: the prefixes HMRC never issues are left out (D, F, I, Q, U, V first or
    # second; O second; BG, GB, KN, NK, NT, TN, ZZ)
    ("NI_NUMBER", "ni", re.compile(r"\b(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]"
                                   r"(?P<sep> ?)\d{2}(?P=sep)\d{2}(?P=sep)\d{2}(?P=sep)[A-D]\b"), None),
    ("SSN", "digits", re.compile(r"(?<![\w-])(?P<area>\d{3})(?P<sep>[- ])(?P<group>\d{2})(?P=sep)(?P<serial>\d{4})"
                                 r"(?![\w-]|\.\d)"), _ssn),
    ("IP_ADDRESS", "dot", re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w]|\.\d)"), None),
    ("IP_ADDRESS", "colon", re.compile(
        r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|:)?(?![\w:])"), _ipv6),
    # candidates only: _phone asks libphonenumber. Groups of digits with one kind of separator, an optional
    # +country code or (area code); never next to a word, a colon (times) or a dotted number (versions)
    ("PHONE", "digits", re.compile(
        r"(?<![\w+#$/:.-])(?:\+\d{1,3}[ .-]?|\(\d{1,5}\)[ .-]?)?\d{1,12}(?:[ .-]\(?\d{1,8}\)?){0,5}"
        r"(?![\w:]|[.-]\d)"), _phone),
]

# Cheap checks first: substring tests run at memchr speed, and the digit patterns only run on
# text with seven digits close together (the least a phone or card number has).
_LITERALS = (("pem", "-----BEGIN"), ("jwt", "eyJ"), ("sk", "sk-"), ("aws", "AKIA"), ("aws", "ASIA"),
             ("gh", "ghp_"), ("gh", "gho_"), ("gh", "ghu_"), ("gh", "ghs_"), ("gh", "ghr_"), ("gh", "github_pat_"),
             ("slack", "xox"), ("at", "@"), ("colon", ":"), ("stripe", "k_live_"), ("stripe", "k_test_"),
             ("hf", "hf_"), ("google", "AIza"), ("bearer", "earer "), ("bearer", "earer\t"), ("url", "://"))
# one pass over the text finds every literal trigger (twenty `in` tests cost more)
_TRIGGER_OF = {literal: name for name, literal in _LITERALS}
_TRIGGERS = re.compile("|".join(re.escape(literal) for literal in sorted(_TRIGGER_OF, key=len, reverse=True)))
_DIGIT = re.compile(r"\d")
_DIGIT_DOT = re.compile(r"\d\.\d")
_SEVEN_DIGITS = re.compile(r"\d(?:[^\d\n]{0,3}\d){6}")
_NI_TAIL = re.compile(r"\d\d ?\d\d ?\d\d ?[A-D]\b")

PLACEHOLDER_TYPES = tuple(dict.fromkeys(rule[0] for rule in _RULES))


def _substitute(kind: str, replacer: Replacer | None, counts: Counter, match: re.Match) -> str:
    result = f"[{kind}]" if replacer is None else replacer(match)
    if result is None:
        return match.group(0)
    counts[kind] += 1
    return result


def scrub_text(text: str, counts: Counter) -> str:
    """``text`` with every finding replaced by its placeholder; ``counts`` gets one per finding."""
    present = {_TRIGGER_OF[literal] for literal in _TRIGGERS.findall(text)}
    if _DIGIT.search(text):
        if _DIGIT_DOT.search(text):
            present.add("dot")
        if _SEVEN_DIGITS.search(text):
            present.add("digits")
        if _NI_TAIL.search(text):
            present.add("ni")
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


def scrub_episode(episode: Episode, counts: Counter) -> Episode:
    """``episode`` with every text a client or a dataset gave scrubbed: messages (their reasoning and tool-call
    arguments too), the rejected answer, the correction, the session and the tools (a description or a default
    can quote a key or an address as well); the same object when nothing was found."""
    messages = _scrub_messages(episode.messages, counts)
    preference = episode.preference
    if preference is not None:
        rejected = _scrub_messages(preference.rejected, counts)
        if rejected is not preference.rejected:
            preference = Preference(preference.prompt_messages, rejected)
    feedback = episode.feedback
    if feedback.correction:
        correction = scrub_text(feedback.correction, counts)
        if correction != feedback.correction:
            feedback = Feedback(feedback.rating, correction)
    session = scrub_text(episode.session, counts) if episode.session else episode.session
    tools = tuple(scrub_value(list(episode.tools), counts)) if episode.tools else episode.tools
    if messages is episode.messages and preference is episode.preference and feedback is episode.feedback \
            and session == episode.session and tools == episode.tools:
        return episode
    return replace(episode, messages=messages, preference=preference, feedback=feedback, session=session,
                   tools=tools)


def _scrub_messages(messages: tuple[Message, ...], counts: Counter) -> tuple[Message, ...]:
    out, changed = [], False
    for message in messages:
        content = scrub_text(message.content, counts)
        reasoning = scrub_text(message.reasoning, counts) if message.reasoning else message.reasoning
        calls = message.tool_calls
        if calls:
            calls = tuple({**call, "function": {**call["function"],
                                                "arguments": scrub_value(call["function"]["arguments"], counts)}}
                          for call in calls)
        # a look-alike (a version, an order number) is kept: the text comes back equal, not the same object
        if content != message.content or reasoning != message.reasoning or calls != message.tool_calls:
            message = replace(message, content=content, reasoning=reasoning, tool_calls=calls)
            changed = True
        out.append(message)
    return tuple(out) if changed else messages

