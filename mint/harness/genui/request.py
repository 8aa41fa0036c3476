"""GenUI answers against their request: is a valid tree also the one the request describes, and one a person
would accept (``request_problem``, ``verify``)? ``request_terms`` reads what a request names."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mint.harness.base import Harness, HarnessSettings, as_record
from mint.harness.genui.tree import DEFAULT_CATALOG, find_tree, load_catalog, shortened, tree_nodes, tree_problems

# --- agreement with the request -------------------------------------------------------------
# A valid tree is not yet an answer: one fixed tree ({"type": "Text", "props": {"text": "Done."}}) is valid for
# every request. ``request_match`` asks the tree to be the one the request (or its reference) describes, and one a
# person would accept: no field or button shown twice, no part the request names left out.

# the words a request names a component by
COMPONENT_WORDS = {"button": "Button", "buttons": "Button", "card": "Card", "cards": "Card", "chart": "Chart",
                   "charts": "Chart", "graph": "Chart", "plot": "Chart", "form": "Form", "image": "Image",
                   "images": "Image", "photo": "Image", "photos": "Image", "picture": "Image", "pictures": "Image",
                   "avatar": "Image", "list": "List", "dropdown": "Select", "dropdowns": "Select", "table": "Table",
                   "field": "TextField", "fields": "TextField", "input": "TextField", "inputs": "TextField"}
_PLURALS = frozenset(w for w in COMPONENT_WORDS if w.endswith("s") and w[:-1] in COMPONENT_WORDS)
# the nouns whose descriptor is the control's visible label: "a save button", "email and phone fields"
CONTROL_NOUNS = {"button": "Button", "buttons": "Button", "field": "field", "fields": "field", "input": "field",
                 "inputs": "field", "dropdown": "Select", "dropdowns": "Select"}
_WORD = re.compile(r"\$?\w[\w'-]*")
_TOKEN = re.compile(r"\$?\w[\w'-]*|[^\w\s]")
_SENTENCE_END = re.compile(r"[.!?:;]\s+")
_QUOTED = re.compile(r"\"([^\"]{1,120})\"|\u201c([^\u201d]{1,120})\u201d")
# words too common to show that a tree is about its request (the fallback when a request names no label)
_COMMON = frozenset("about after also build create display give have into make me page plot please render "
                    "show that their them then these this those what when where which with would your".split())
# words that end a control's descriptor when read backwards from its noun ("with a photo and a SAVE button")
_DESCRIPTOR_END = frozenset("a an the with for of to from has have having each every its my your our their his her "
                            "this that these those some any also".split())
# a descriptor word that says how a control looks, not what it says ("a text field", "a primary button")
_STYLE_WORDS = frozenset("text input required optional primary secondary danger big small large wide new single "
                         "separate big blue red green".split())
_COUNTS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_LINKS = frozenset(("and", "or", ","))
CHART_KINDS = ("line", "bar", "pie")


@dataclass(frozen=True)
class RequestTerms:
    """What a request asks of its tree: the root component (the first it names), the parts it names after
    ``with``, the labels it names (capitalized words past a sentence's first, amounts, numbers), its content
    words (one of them must appear where it names no label), the controls it names by what they say (a
    ``Button`` "save", a ``field`` "email", a ``Select`` "plan"), how many of a component it counts ("three
    cards"), the texts it quotes, and the chart kinds it names."""

    root: str | None
    parts: tuple[str, ...]
    labels: tuple[str, ...]
    words: tuple[str, ...]
    controls: tuple[tuple[str, str], ...] = ()
    counts: tuple[tuple[str, int], ...] = ()
    quoted: tuple[str, ...] = ()
    chart_kinds: tuple[str, ...] = ()
    ordered_list: bool = False          # "as a numbered list", "an ordered list"
    columns: tuple[str, ...] = ()       # "with columns Name, Plan, Start date"
    asks_input: bool = False            # names a form, a field or a dropdown, or asks to pick, enter or search


def _descriptors(tokens: list[str]) -> tuple[list[tuple[str, str]], list[tuple[str, int]], set[int]]:
    """The controls named by their descriptor (read backwards from each control noun, items split at commas,
    ``and`` and ``or``; a dropdown also forwards: "a dropdown for the plan"), the counted components ("three
    plan cards"), and the token positions that describe a component rather than name a label ("a KPI card")."""
    descriptive: set[int]
    controls, counts, descriptive = [], [], set()
    lower = [t.lower() for t in tokens]
    for index, word in enumerate(lower):
        if word not in COMPONENT_WORDS:
            continue
        current: list[str]
        items, current, j = [], [], index - 1
        while j >= 0 and (lower[j] in _LINKS or (_WORD.fullmatch(tokens[j]) and lower[j] not in _DESCRIPTOR_END
                                                   and lower[j] not in COMPONENT_WORDS)):
            if lower[j] in _LINKS:
                if current:
                    items.append(" ".join(reversed(current)))
                current = []
            elif lower[j] in _COUNTS or lower[j].isdigit():      # "three plan cards", "2 save buttons"
                counts.append((COMPONENT_WORDS[word], _COUNTS.get(lower[j]) or int(lower[j])))
                break
            else:
                current.append(tokens[j])
            j -= 1
        if current:
            items.append(" ".join(reversed(current)))
        kind = CONTROL_NOUNS.get(word)
        if kind is None:
            if len(items) == 1:     # "a KPI card" says what kind of card, not what it shows
                descriptive.update(range(j + 1, index))
            continue
        named = [item for item in reversed(items)
                 if any(w.lower() not in _STYLE_WORDS for w in _WORD.findall(item))]
        if not named and kind == "Select" and index + 2 < len(tokens) and lower[index + 1] in ("for", "of"):
            following, j = [], index + 2
            while j < len(tokens) and _WORD.fullmatch(tokens[j]) and lower[j] not in ("and", "or", "with"):
                if lower[j] not in _DESCRIPTOR_END:
                    following.append(tokens[j])
                j += 1
            named = [" ".join(following)] if following else []
        controls += [(kind, item) for item in named]
    return controls, counts, descriptive


def _named_columns(tokens: list[str]) -> tuple[str, ...]:
    """The columns a request lists after ``columns``: capitalized names (a name may go on in lowercase: "Start
    date"), split at commas and ``and``, up to the first word that starts none."""
    lower = [t.lower() for t in tokens]
    if "columns" not in lower:
        return ()
    current: list[str]
    columns, current = [], []
    for token in tokens[lower.index("columns") + 1:]:
        if token.lower() in _LINKS:
            if current:
                columns.append(" ".join(current))
            current = []
        elif _WORD.fullmatch(token) and (token[:1].isupper() or token[:1].isdigit() or current):
            current.append(token)
        else:
            break
    if current:
        columns.append(" ".join(current))
    return tuple(columns)


_INPUT_WORDS = re.compile(r"\b(?:pick|choose|select|enter|type|fill|search|log ?in|sign ?in|sign ?up|subscribe)\b", re.I)


def request_terms(request: str) -> RequestTerms:
    """The components, labels and controls ``request`` names. The root is the first component named before
    ``with`` (\"a form to book a table with ... fields\" asks for a Form, whose parts are TextFields, not a Table)."""
    head, _sep, tail = request.partition(" with ")
    head_words = [w.lower() for w in _WORD.findall(head) if w.lower() in COMPONENT_WORDS]
    # "three plan cards" are parts: one tree has one root, so it is the container that holds them
    named = [COMPONENT_WORDS[w] for w in head_words if w not in _PLURALS]
    parts = tuple(dict.fromkeys([COMPONENT_WORDS[w] for w in head_words if w in _PLURALS]
                                + [COMPONENT_WORDS[w.lower()] for w in _WORD.findall(tail)
                                   if w.lower() in COMPONENT_WORDS]))
    tokens = _TOKEN.findall(request)
    controls, counts, descriptive = _descriptors(tokens)
    descriptive_words = {tokens[i] for i in descriptive}
    labels = []
    for sentence in _SENTENCE_END.split(request):
        for index, word in enumerate(_WORD.findall(sentence)):
            if word[:1] == "$" or word.isdigit() or (index > 0 and len(word) > 1 and word[:1].isupper()
                                                     and word not in descriptive_words):
                labels.append(word)
    words = tuple(dict.fromkeys(w.lower() for w in _WORD.findall(request)
                                if len(w) >= 4 and w.lower() not in _COMMON and w.lower() not in COMPONENT_WORDS))
    quoted = tuple(a or b for a, b in _QUOTED.findall(request))
    kinds = re.findall(r"\b(" + "|".join(CHART_KINDS) + r")\s+(?:chart|graph|plot)s?\b", request, re.I)
    return RequestTerms(named[0] if named else None, parts, tuple(dict.fromkeys(labels)), words,
                        tuple(dict.fromkeys(controls)), tuple(dict.fromkeys(counts)), quoted,
                        tuple(dict.fromkeys(k.lower() for k in kinds)),
                        bool(re.search(r"\b(?:numbered|ordered)\s+list", request, re.I)), _named_columns(tokens),
                        bool({"Form", "TextField", "Select"} & (({named[0]} if named else set()) | set(parts)))
                        or bool(_INPUT_WORDS.search(request)))


def tree_types(tree: Any) -> set[str]:
    """The component types a tree uses."""
    return {node["type"] for _path, node in tree_nodes(tree)
            if isinstance(node, dict) and isinstance(node.get("type"), str)}


# the props a person reading the page sees (an image's src and alt, an action, a field's name are not shown)
VISIBLE_PROPS = frozenset(("title", "subtitle", "text", "label", "placeholder", "options", "submitLabel", "caption",
                           "columns", "rows", "items", "labels", "series"))


def tree_text(tree: Any) -> str:
    """Every string a person reading the page sees (``VISIBLE_PROPS``: titles, texts, labels, options, cells,
    items, a chart's labels and series), lowercased and joined."""
    found, stack = [], [_props(node).get(key) for _path, node in tree_nodes(tree) for key in VISIBLE_PROPS]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(value for key, value in item.items() if key in ("name", "values"))
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found.append(item.lower())
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            found.append(str(item))
    return "\n".join(found)


def _props(node: Any) -> dict:
    return node.get("props") if isinstance(node, dict) and isinstance(node.get("props"), dict) else {}


def _shown(value: Any) -> str:
    """A label as a person compares two of them: case, spacing and trailing punctuation aside."""
    return " ".join(re.findall(r"\w+", str(value).lower()))


_SUFFIXES = ("ations", "ation", "ings", "ing", "ers", "er", "ed", "es", "s", "e")
# words that say nothing of what a control or a title is about
_FILLER = frozenset("a an the to of in on at for and or my your our this that it now up".split())
# the particles a word may be written together with ("Login" for "log in", "Signup" for "sign up")
_PARTICLES = ("in", "up", "out", "on", "day")


def _stem(word: str) -> str:
    """``word`` without one common ending (\"saved\", \"saves\" and \"save\" alike), keeping three letters."""
    word = word.lower()
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[:-len(suffix)]
    return word


def _content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _FILLER]


def _same_word(shown: str, wanted: str) -> bool:
    """Whether a shown word is the wanted one: the same stem, or the wanted word written together with a particle
    or a word of its own (\"Login\" for \"log\", \"Birthday\" for \"birth\"; not \"Undownload\" for \"undo\")."""
    if _stem(shown) == _stem(wanted):
        return True
    rest = shown[len(wanted):] if shown.startswith(wanted) and len(wanted) >= 3 else ""
    return rest in _PARTICLES


def _says(text: str, phrase: str, every: bool = False) -> bool:
    """Whether ``text`` shows one of ``phrase``'s words (with ``every``, all of them; see ``_same_word``)."""
    have = _content_words(text)
    found = [any(_same_word(h, w) for h in have) for w in _content_words(phrase)]
    return bool(found) and (all(found) if every else any(found))


def _control_texts(tree: Any) -> dict[str, list[str]]:
    """What each kind of control shows: every Button's label and a Form's submit label (a form renders its own
    submit button), every field's label and placeholder, every dropdown's label, placeholder and options."""
    found: dict[str, list[str]] = {"Button": [], "field": [], "Select": []}
    for _path, node in tree_nodes(tree):
        props, kind = _props(node), node.get("type") if isinstance(node, dict) else None
        if kind == "Button":
            found["Button"].append(str(props.get("label", "")))
        elif kind == "Form" and props.get("submitLabel"):
            found["Button"].append(str(props["submitLabel"]))
        elif kind in ("TextField", "Select"):
            text = " ".join(str(props.get(k, "")) for k in ("label", "placeholder"))
            found["field"].append(text)
            if kind == "Select":
                options = props.get("options") if isinstance(props.get("options"), list) else []
                found["Select"].append(text + " " + " ".join(map(str, options)))
    return found


def _missing_control(terms: RequestTerms, tree: Any) -> str | None:
    """The first control the request names that no distinct control of its kind says: each named item needs a
    control of its own (two named buttons are two buttons), the items with the fewest candidates placed first."""
    texts = _control_texts(tree)
    for kind in ("field", "Select", "Button"):
        items = [item for k, item in terms.controls if k == kind]
        # a button's label says all of what the request calls it ("Log in" is not the "Log out" button)
        candidates = {item: {i for i, text in enumerate(texts[kind]) if _says(text, item, every=kind == "Button")}
                      for item in items}
        taken: set[int] = set()
        for item in sorted(items, key=lambda i: len(candidates[i])):
            free = sorted(candidates[item] - taken)
            if not free:
                noun = {"field": "field", "Select": "dropdown", "Button": "button"}[kind]
                return f"no {noun} for {item!r}"
            taken.add(free[0])
    return None


def _repeats(tree: Any) -> str | None:
    """What a person would see twice: a field (its label or name) twice in one form, a button label twice among
    one container's buttons (a form's own submit button counted), an entry twice in a table's columns or rows,
    a list's items, a dropdown's options or a chart's labels, or one child repeated under its parent."""
    scopes: dict[int, dict[str, list]] = {}
    stack = [(tree, id(tree))]
    while stack:
        node, form_scope = stack.pop()
        if not isinstance(node, dict):
            continue
        props, kind = _props(node), node.get("type")
        if kind == "Form":
            form_scope = id(node)
        if kind in ("TextField", "Select"):
            fields = scopes.setdefault(form_scope, {"labels": [], "names": []})
            fields["labels"].append(_shown(props.get("label", "")))
            fields["names"].append(str(props.get("name", "")))
        for key, entries in (("columns", props.get("columns")), ("items", props.get("items")),
                             ("options", props.get("options")), ("labels", props.get("labels"))):
            if isinstance(entries, list):
                shown = [_shown(e) for e in entries if isinstance(e, str)]
                twice = next((e for i, e in enumerate(shown) if e and e in shown[:i]), None)
                if twice is not None:
                    return f"the {kind} shows {twice!r} twice in its {key}"
        rows = props.get("rows")
        if kind == "Table" and isinstance(rows, list):
            dumped = [json.dumps(r, sort_keys=True) for r in rows]
            if len(set(dumped)) < len(dumped):
                return "the Table repeats a row"
        children = node.get("children") if isinstance(node.get("children"), list) else []
        buttons = [_shown(_props(c).get("label", "")) for c in children if isinstance(c, dict)
                   and c.get("type") == "Button"]
        if kind == "Form" and props.get("submitLabel"):
            buttons.append(_shown(props["submitLabel"]))
        twice = next((b for i, b in enumerate(buttons) if b and b in buttons[:i]), None)
        if twice is not None:
            return f"the button {twice!r} is shown twice"
        field_labels = {_shown(_props(c).get("label", "")) for c in children if isinstance(c, dict)
                        and c.get("type") in ("TextField", "Select")}
        twice = next((b for b in buttons if b and b in field_labels), None)     # one label, one control
        if twice is not None:
            return f"the label {twice!r} is on a field and a button"
        dumped = [json.dumps(c, sort_keys=True) for c in children]
        if len(set(dumped)) < len(dumped):
            repeated = next(c for i, c in enumerate(children) if dumped[i] in dumped[:i])
            return f"a {repeated.get('type') if isinstance(repeated, dict) else 'child'} is repeated"
        stack.extend((child, form_scope) for child in children)
    for fields in scopes.values():
        for what in ("labels", "names"):
            values = fields[what]
            twice = next((v for i, v in enumerate(values) if v and v in values[:i]), None)
            if twice is not None:
                return f"the field {twice!r} is repeated" if what == "labels" else \
                    f"two fields are both named {twice!r}"
    return None


def request_problem(request: str, tree: Any, valid: bool, reference: dict | None = None) -> str | None:
    """Why ``tree`` is not the answer to ``request`` (None when it is), judged as a careful person reading the
    page would. It must be valid, have the root type of ``reference`` (else the root the request names), hold
    every component type of ``reference`` (else the parts the request names after ``with``) and as many of a
    component as the request counts, give each button, field and dropdown the request names by what it says a
    control of its own, draw the chart kind it names, number a list it asks to number, show every label and
    quoted text it names (or, where it names no label, one of its content words) and exactly the table columns
    it lists, each row filling them. It must not show what nobody asked for: a field or dropdown where the
    request asks for no input, a button that is not one the request names, a title that says none of the
    request's words, a text that says none of its words or values, a web address as text, a value it states
    shown otherwise ("$96" or "96%" for "96", "6" for "6 min"), or anything twice (a field, a button, a label
    on a field and a button, a table's column or row, a list's item, a title or text). The metric
    ``request_match`` and ``verify`` both decide with this."""
    if not valid:
        return "not valid under the catalog"
    terms = request_terms(request)
    root = reference.get("type") if isinstance(reference, dict) else terms.root
    if root is not None and tree.get("type") != root:
        return f"root is {shortened(tree.get('type'))}, the request asks for {root}"
    wanted = tree_types(reference) if isinstance(reference, dict) else set(terms.parts)
    have = tree_types(tree) | ({"Button"} if "Form" in tree_types(tree) else set())  # a form's submit button
    missing = sorted(wanted - have)
    if missing:
        return f"no {', '.join(missing)} in the tree"
    nodes = [node for _path, node in tree_nodes(tree) if isinstance(node, dict)]
    for kind, count in terms.counts:
        found = sum(1 for n in nodes if n.get("type") == kind) + (
            sum(1 for n in nodes if n.get("type") == "Form") if kind == "Button" else 0)
        if found < count:
            return f"{found} {kind} in the tree, the request asks for {count}"
    charts = {_props(n).get("kind") for n in nodes if n.get("type") == "Chart"}
    absent_kinds = [k for k in terms.chart_kinds if k not in charts]
    if absent_kinds:
        return f"no {absent_kinds[0]} chart in the tree"
    if terms.ordered_list and not any(n.get("type") == "List" and _props(n).get("ordered") is True for n in nodes):
        return "the list is not numbered (ordered: true)"
    missing_control = _missing_control(terms, tree)
    if missing_control:
        return missing_control
    text = tree_text(tree)
    absent = [label for label in terms.labels if label.lower() not in text]
    if absent:
        return f"the tree does not show {', '.join(map(repr, absent))}"
    flat = _shown(text)
    unquoted = [q for q in terms.quoted if _shown(q) not in flat]
    if unquoted:
        return f"the tree does not show {unquoted[0]!r}"
    if not terms.labels and terms.words and not any(word in text for word in terms.words):
        return "the tree shows none of the request's words"
    return (_column_problem(terms, nodes) or _unasked_control(request, terms, tree, nodes, reference)
            or _unrelated_title(request, nodes) or _unrelated_text(request, terms, nodes) or _shown_link(request, tree)
            or _unshown_value(request, tree) or _repeats(tree) or _text_twice(nodes))


def _column_problem(terms: RequestTerms, nodes: list[dict]) -> str | None:
    """A table whose columns are not the ones the request lists, or a row that does not fill its columns."""
    for node in nodes:
        if node.get("type") != "Table":
            continue
        columns = [c for c in _props(node).get("columns") or [] if isinstance(c, str)]
        if terms.columns:
            shown = {_shown(c) for c in columns}
            wanted = {_shown(c) for c in terms.columns}
            missing = next((c for c in terms.columns if _shown(c) not in shown), None)
            if missing is not None:
                return f"the Table has no column {missing!r}"
            extra = next((c for c in columns if _shown(c) not in wanted), None)
            if extra is not None:
                return f"the Table has a column the request does not name: {extra!r}"
        for row in _props(node).get("rows") or []:
            if isinstance(row, list) and len(row) != len(columns):
                return f"a row of the Table has {len(row)} cell(s) for {len(columns)} column(s)"
    return None


def _unasked_control(request: str, terms: RequestTerms, tree: Any, nodes: list[dict],
                     reference: dict | None) -> str | None:
    """A control the request does not ask for: a field or dropdown where it asks for no input, a button that
    is none of the buttons it names and says none of its words."""
    types = {n.get("type") for n in nodes}
    asks_input = bool({"TextField", "Select", "Form"} & tree_types(reference)) if isinstance(reference, dict) \
        else terms.asks_input
    unasked = next((t for t in ("TextField", "Select") if t in types), None) if not asks_input else None
    if unasked is not None:
        return f"a {unasked} the request does not ask for"
    named = [item for kind, item in terms.controls if kind == "Button"]
    wanted = _content_words(request)
    for node in nodes:
        if node.get("type") == "Button":
            label = str(_props(node).get("label", ""))
            # where the request names its buttons, each button is one of them (one per card may repeat); where it
            # names none, a button at least says one of its words ("Save" for "... and save it")
            asked = any(_says(label, item, every=True) for item in named) if named else any(
                _same_word(h, w) for h in _content_words(label) for w in wanted)
            if not asked:
                return f"a button the request does not ask for: {label!r}"
    return None


_LINK = re.compile(r"https?://|www\.", re.I)


def _shown_link(request: str, tree: Any) -> str | None:
    """A web address shown as text that the request never gave (an image's address copied into a caption)."""
    if _LINK.search(request):
        return None
    link = next((line for line in tree_text(tree).splitlines() if _LINK.search(line)), None)
    return f"the tree shows a web address as text: {link!r}" if link else None


# a value a request states for the page to show: a price, a percentage, an amount with its unit, or a number
# given as a value ("at 96", "Signups: 412"); not a count of parts ("a list of 5 steps")
_UNIT = r"(?:\s?(?:min|mins|minutes|hours|hrs|h|ms|sec|secs|seconds|days|kg|km|gb|mb|k)\b)"
_NUMBER = r"\d+(?:\.\d+)?"
_STATED_VALUE = re.compile(r"(?<![\w.$])(\$" + _NUMBER + r"(?:k|m|bn)?(?![\w.])|" + _NUMBER + "%|" + _NUMBER + _UNIT
                           + r"|(?<=at )" + _NUMBER + r"(?![\w.%])|(?<=: )" + _NUMBER + r"(?![\w.%]))", re.I)


def _unshown_value(request: str, tree: Any) -> str | None:
    """A value the request states that the page does not show as stated: "6" for "6 min", "$96" for "96"
    (thousands separators aside, and a price's zero cents: "$1,200.00" shows "$1200")."""
    def plain(text: str) -> str:
        return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower())

    text = plain(tree_text(tree))
    for value in _STATED_VALUE.findall(plain(request)):
        number = re.escape(value).replace(r"\ ", r"\s?")
        if not re.search(r"(?<![\w.$])" + number + r"(?:\.0+)?(?![\w%]|\.\d)", text):
            return f"the tree does not show {value!r} as the request states it"
    return None


def _text_twice(nodes: list[dict]) -> str | None:
    """One text shown twice on the page: a title repeated in a text or a nested card's title."""
    seen: set[str] = set()
    for node in nodes:
        for key in ("title", "subtitle", "text", "caption"):
            shown = _shown(_props(node).get(key, "")) if isinstance(_props(node).get(key), str) else ""
            if shown and shown in seen:
                return f"the tree shows {_props(node)[key]!r} twice"
            seen.add(shown)
    return None


def _unrelated_text(request: str, terms: RequestTerms, nodes: list[dict]) -> str | None:
    """Where the request says what the page shows (a quoted text, a stated value), a text that says none of its
    words ("Rewards" on a card for Signups at 412, a template's "${message}"); where it leaves the content to
    the answer ("a weather card for Oslo"), any text may fill it."""
    if not terms.quoted and not _STATED_VALUE.search(request.lower()):
        return None
    wanted = _content_words(request)
    for node in nodes:
        text = _props(node).get("text") if node.get("type") == "Text" else None
        if isinstance(text, str) and text.strip() and not any(
                _same_word(h, w) for h in _content_words(text) for w in wanted):
            return f"the text {text!r} says nothing of the request"
    return None


def _unrelated_title(request: str, nodes: list[dict]) -> str | None:
    """A title that says none of the request's words (a card titled "Powers up" for a password alert)."""
    wanted = _content_words(request)
    for node in nodes:
        title = _props(node).get("caption" if node.get("type") == "Table" else "title")
        if isinstance(title, str) and title.strip() and not any(
                _same_word(h, w) for h in _content_words(title) for w in wanted):
            return f"the {node.get('type')} title {title!r} says nothing of the request"
    return None


def verify(request: str | dict, answer: str, catalog: Path = DEFAULT_CATALOG) -> tuple[bool, str]:
    """Whether ``answer`` is a GenUI answer to ``request`` (the user's text, or a record or episode whose last
    user message it is), judged without a reference by the catalog and the
    request itself: one valid tree, the root the request names first, the parts it names after ``with``, the
    labels it names (see ``request_problem``, which the gated metric ``request_match`` uses too).

    What it cannot check: whether the data is right (a chart's values, a list's items, a table's rows are
    the model's own); the layout of a request that names no component (only validity and one of its words);
    requests that name components with words outside ``COMPONENT_WORDS``."""
    text = Harness(HarnessSettings()).request(as_record(request))
    parsed = find_tree(answer)
    if parsed.tree is None:
        return False, f"unparseable: {parsed.reason}"
    valid = load_catalog(catalog)[1].is_valid(parsed.tree)
    if not valid:
        return False, (tree_problems(parsed.tree, catalog, limit=1) or ["not valid"])[0]
    problem = request_problem(text, parsed.tree, valid)
    return problem is None, problem or "valid, and the tree the request asks for"


