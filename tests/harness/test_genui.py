import json
from pathlib import Path

import pytest

from mint.cli import main
from mint.harness.base import HarnessSettings
from mint.harness.genui import GenuiHarness, parse_tree

HELDOUT = [json.loads(l) for l in open(Path(__file__).parents[2] / "examples/heldout/genui.jsonl")]


def test_reference_trees_are_valid_and_broken_ones_are_not():
    harness = GenuiHarness(HarnessSettings())
    good = harness.aggregate([harness.score(r, [json.dumps(r["reference"])]) for r in HELDOUT])
    assert good == {"parse_rate": 1.0, "schema_valid_rate": 1.0, "required_props_rate": 1.0, "root_type_match": 1.0,
                    "request_match": 1.0, "off_request_rate": 0.0}
    record = HELDOUT[0]
    missing = {"type": "Button", "props": {"label": "Go"}}                       # no action
    unknown = {"type": "Carousel", "props": {}}
    (s1,), (s2,), (s3,) = ([harness.score(record, [o])] for o in
                           (json.dumps(missing), json.dumps(unknown), "here is a form"))
    assert (s1["parse_rate"], s1["schema_valid_rate"], s1["required_props_rate"]) == (1.0, 0.0, 0.0)
    assert (s2["schema_valid_rate"], s2["required_props_rate"]) == (0.0, 0.0)
    assert s3["parse_rate"] == 0.0


def test_fenced_tree_parses():
    assert parse_tree('```json\n{"type": "Text", "props": {"text": "hi"}}\n```') == \
        {"type": "Text", "props": {"text": "hi"}}


def test_render_writes_a_page(tmp_path, capsys):
    tree = HELDOUT[0]["reference"]
    (tmp_path / "tree.json").write_text(json.dumps(tree))
    assert main(["genui", "render", str(tmp_path / "tree.json"), "-o", str(tmp_path / "page.html"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    page = (tmp_path / "page.html").read_text()
    assert result["valid"] and page.startswith("<!doctype html>") and "<" in page
    (tmp_path / "bad.json").write_text("nope")
    assert main(["genui", "render", str(tmp_path / "bad.json"), "-o", str(tmp_path / "x.html")]) == 2


RECORD = {"messages": [{"role": "user", "content": "a sign-up form"}]}
CARD = {"type": "Card", "props": {"title": "Sign up"}, "children": [
    {"type": "Text", "props": {"text": "Welcome"}},
    {"type": "Buton", "props": {"label": "Go"}},
    {"type": "Button", "props": {"label": "Go"}}]}


def test_children_that_are_not_a_list_score_zero_with_the_reason():
    scores = GenuiHarness(HarnessSettings()).score(RECORD, [json.dumps({**CARD, "children": 5})])
    assert scores["schema_valid_rate"] == 0.0 and "children: 5 is not of type 'array'" in scores["_reason"]


def test_thousand_deep_json_is_refused_with_a_reason():
    deep = '{"type": "Card", "props": {"title": "x"}, "children": ' + "[" * 1000 + "]" * 1000 + "}"
    for output in (deep, '{"a": ' * 1000 + "1" + "}" * 1000):
        scores = GenuiHarness(HarnessSettings()).score(RECORD, [output])
        assert scores["parse_rate"] == 0.0 and "nests more than" in scores["_reason"]


def test_a_tree_with_prose_around_it_parses():
    tree = {"type": "Text", "props": {"text": "braces } { and \" quotes"}}
    assert parse_tree(f"Sure! Here it is:\n{json.dumps(tree)}\nHope that {{helps}}.") == tree
    assert parse_tree(f"Here:\n```json\n{json.dumps(tree)}\n```\nDone.") == tree


def test_two_trees_or_a_cut_off_tree_are_not_one_tree():
    text = json.dumps({"type": "Text", "props": {"text": "a"}})
    assert parse_tree(f"{text} or {text}") is None
    # the outer object never closes: its inner Text node must not be taken for the answer
    assert parse_tree('Here: {"type": "Card", "children": [{"type": "Text", "props": {"text": "hi"}}') is None


def test_an_invalid_tree_names_its_first_failing_node():
    from mint.harness.genui import tree_problems

    assert tree_problems(CARD) == ["children[1]: unknown component 'Buton' (did you mean Button?)",
                                   "children[2] (Button): props: 'action' is a required property"]
    assert tree_problems({"type": "Card", "props": {"title": "x"}}) == []


def test_render_names_the_failing_node_and_accepts_prose(tmp_path, capsys):
    answer = tmp_path / "answer.txt"
    answer.write_text("Here is the form you asked for:\n" + json.dumps(CARD) + "\nLet me know!")
    # the page is written (it shows what could be drawn), and the exit says the catalog refused the tree
    assert main(["genui", "render", str(answer), "-o", str(tmp_path / "page.html")]) == 1
    assert (tmp_path / "page.html").is_file()
    printed = " ".join(capsys.readouterr().out.split())   # rich wraps at the terminal width
    assert "children[1]: unknown component 'Buton' (did you mean Button?)" in printed
    assert "is not valid under any of the given schemas" not in printed and "Welcome" not in printed
    assert main(["genui", "render", str(answer), "-o", str(tmp_path / "page.html"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["problems"][1] == \
        "children[2] (Button): props: 'action' is a required property"


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"", b"[1, 2]", b"{" * 5000])
def test_render_refuses_odd_files_with_exit_2(tmp_path, content, capsys):
    (tmp_path / "odd.json").write_bytes(content)
    assert main(["genui", "render", str(tmp_path / "odd.json"), "-o", str(tmp_path / "x.html")]) == 2
    assert "odd.json" in capsys.readouterr().err and not (tmp_path / "x.html").exists()


def test_render_to_a_missing_folder_is_exit_2(tmp_path):
    (tmp_path / "tree.json").write_text(json.dumps(HELDOUT[0]["reference"]))
    assert main(["genui", "render", str(tmp_path / "tree.json"), "-o", str(tmp_path / "no" / "page.html")]) == 2


def test_a_wrong_leaf_under_many_nested_cards_is_found_without_exponential_validation():
    # the catalog's oneOf re-validates every child under each container alternative: ~3^depth work when
    # a deep leaf is wrong (8 levels took a minute); the node-by-node walk is linear
    tree = {"type": "Text", "props": {"text": 5}}
    for _ in range(30):
        tree = {"type": "Card", "props": {"title": "x"}, "children": [tree]}
    scores = GenuiHarness(HarnessSettings()).score(RECORD, [json.dumps(tree)])
    assert scores["schema_valid_rate"] == 0.0
    assert scores["_reason"] == "children[0]" + ".children[0]" * 29 + " (Text): props.text: 5 is not of type 'string'"


def test_the_genui_reward_pays_in_full_only_for_the_tree_the_request_asks_for():
    from mint.harness.genui import reward as genui_reward

    prompt = [{"role": "user", "content": "Show my grocery list as a list."}]
    asked = json.dumps({"type": "List", "props": {"title": "Grocery list", "items": ["milk", "eggs"]}})
    done = json.dumps({"type": "Text", "props": {"text": "Done."}})
    assert genui_reward([prompt] * 4, [asked, done, "{}", "a list"]) == [1.0, 0.6, 0.3, 0.0]


# --- repair: a failing answer put into form, for the verifier to judge again ---------------------------

TEA_CARD = ('{"type": "Card", "props": {"title": "Tea"}, "children": '
            '[{"type": "Text", "props": {"text": "Tea ]} \\" x"}}]}')


def test_repair_puts_closing_brackets_in_the_order_their_openers_need_and_ignores_brackets_in_text():
    from mint.harness.genui import repair

    swapped = TEA_CARD.replace("}}]}", "}]}}")      # a small model writes ]} where }] belongs
    assert swapped != TEA_CARD and parse_tree(swapped) is None
    assert json.loads(repair(swapped)) == json.loads(TEA_CARD)
    assert repair(TEA_CARD) is None                         # nothing to repair: the answer is left as it is
    assert repair(TEA_CARD + "}]") == TEA_CARD                  # what follows the closed tree is not part of it


def test_repair_closes_a_cut_off_answer_after_its_last_complete_element_and_drops_repeats():
    from mint.harness.genui import repair

    item = '{"type": "Text", "props": {"text": "x"}}'
    looping = '{"type": "Stack", "children": [' + ", ".join([item] * 5) + ', {"type": "Te'
    assert json.loads(repair(looping)) == {"type": "Stack", "children": [json.loads(item)]}
    listing = '{"type": "List", "props": {"title": "Jobs", "items": ["a", "b", "a", "b", "a", "b'
    assert json.loads(repair(listing)) == {"type": "List", "props": {"title": "Jobs", "items": ["a", "b"]}}
    chart = '{"type": "Chart", "props": {"labels": ["a", "b"], "series": [{"name": "s", "values": [1, 1, 2'
    assert json.loads(repair(chart))["props"]["series"] == [{"name": "s", "values": [1, 1]}]   # numbers may repeat


@pytest.mark.parametrize("answer", ["", "no tree at all", '{"type": "Te', "[1, 2", 7, None, '{"a": {"b": '])
def test_repair_gives_nothing_where_nothing_is_complete(answer):
    from mint.harness.genui import repair

    assert repair(answer) is None


def test_a_repaired_tree_can_be_written_as_utf8_whatever_escapes_the_answer_holds():
    from mint.harness.genui import repair

    fixed = repair('{"type": "List", "props": {"title": "Café", "items": ["\\udcff", "é", "é", "x')   # cut off; "é" repeats
    fixed.encode("utf-8")                           # a lone surrogate stays escaped, so the episode can be written
    assert json.loads(fixed)["props"]["items"] == ["\udcff", "é"]


# --- what a person would reject: a field or a button twice, a part the request names left out --------------

def _field(label, name=None):
    return {"type": "TextField", "props": {"label": label, "name": name or label.lower()}}


def _button(label, action="go"):
    return {"type": "Button", "props": {"label": label, "action": action}}


def _verdict(request, tree):
    from mint.harness.genui import verify

    return verify(request, json.dumps(tree))


SIGNUP = "Make a form to sign up with name, email and phone fields."


def _signup(*fields, submit="Sign up", title="Sign up"):
    return {"type": "Form", "props": {"title": title, "submitLabel": submit}, "children": list(fields)}


def test_a_form_that_repeats_a_field_is_not_the_answer():
    assert _verdict(SIGNUP, _signup(_field("Name"), _field("Email"), _field("Phone")))[0]
    repeated = _signup(_field("Name"), _field("Email"), _field("Phone"), _field("Email", "email2"))
    assert _verdict(SIGNUP, repeated) == (False, "the field 'email' is repeated")
    # the same name under two labels loses one value when the form is sent
    assert _verdict(SIGNUP, _signup(_field("Name"), _field("Email", "x"), _field("Phone", "x"))) == (
        False, "two fields are both named 'x'")


def test_a_field_the_request_names_must_be_in_the_form():
    verdict = _verdict(SIGNUP, _signup(_field("Name"), _field("Email")))
    assert verdict == (False, "no field for 'phone'")
    # a label that extends the named word is the field ("date of birth" as "Birthday")
    request = "Make a form to join with email and date of birth fields."
    assert _verdict(request, _signup(_field("Email"), _field("Birthday"), title="Join"))[0]


def test_a_button_label_shown_twice_is_not_the_answer():
    request = "Show a card asking \"Delete this file?\" with Cancel and Delete buttons."
    card = {"type": "Card", "props": {"title": "Delete this file?"},
            "children": [_button("Cancel"), _button("Delete")]}
    assert _verdict(request, card)[0]
    card["children"].append(_button("Delete", "delete2"))
    assert _verdict(request, card) == (False, "the button 'delete' is shown twice")
    # a form draws its own submit button: a child button saying the same shows it twice
    assert _verdict(SIGNUP, _signup(_field("Name"), _field("Email"), _field("Phone"), _button("Sign up"))) == (
        False, "the button 'sign up' is shown twice")


def test_each_button_the_request_names_needs_a_button_of_its_own():
    request = "Show a card asking \"Delete this file?\" with Cancel and Delete buttons."
    one = {"type": "Card", "props": {"title": "Delete this file? Cancel"}, "children": [_button("Delete")]}
    assert _verdict(request, one) == (False, "no button for 'Cancel'")
    request = "Show a profile card for Ana Silva with a photo and a message button."
    card = {"type": "Card", "props": {"title": "Ana Silva"}, "children": [
        {"type": "Image", "props": {"src": "a.png", "alt": "Ana"}}, _button("Follow")]}
    assert _verdict(request, card) == (False, "no button for 'message'")
    card["children"][1] = _button("Send a message")
    assert _verdict(request, card)[0]
    # a form's submit button is the button the request names
    assert _verdict("Make a form with an email field and a subscribe button.",
                    {"type": "Form", "props": {"submitLabel": "Subscribe"}, "children": [_field("Email")]})[0]


def test_a_dropdown_the_request_names_must_offer_its_choice():
    request = "Make a settings card with a dropdown for the theme (Light, Dark) and a save button."
    select = {"type": "Select", "props": {"label": "Theme", "name": "theme", "options": ["Light", "Dark"]}}
    card = {"type": "Card", "props": {"title": "Settings"}, "children": [select, _button("Save")]}
    assert _verdict(request, card)[0]
    select["props"].update(label="Mode", name="mode")
    assert _verdict(request, card) == (False, "no dropdown for 'theme'")


def test_a_counted_component_must_appear_that_many_times():
    request = "Make three plan cards (Basic, Pro, Team) with a choose button in each."
    cards = [{"type": "Card", "props": {"title": t}, "children": [_button("Choose", t)]} for t in ("Basic", "Pro")]
    stack = {"type": "Stack", "props": {"direction": "horizontal"}, "children": cards + [
        {"type": "Text", "props": {"text": "Team"}}]}
    assert _verdict(request, stack) == (False, "2 Card in the tree, the request asks for 3")
    stack["children"][2] = {"type": "Card", "props": {"title": "Team"}, "children": [_button("Choose", "team")]}
    assert _verdict(request, stack)[0]     # the same label on each card's own button is not a repeat


def test_the_chart_kind_the_request_names_is_the_chart_drawn():
    request = "Plot visits per day as a line chart."
    chart = {"type": "Chart", "props": {"title": "Visits per day", "kind": "bar", "labels": ["Mon", "Tue"],
                                        "series": [{"name": "visits", "values": [3, 4]}]}}
    assert _verdict(request, chart) == (False, "no line chart in the tree")
    chart["props"]["kind"] = "line"
    assert _verdict(request, chart)[0]


def test_a_numbered_list_is_ordered():
    request = "Show the steps to brew coffee as a numbered list."
    steps = {"type": "List", "props": {"title": "Brew coffee", "items": ["Grind", "Pour", "Wait"]}}
    assert _verdict(request, steps) == (False, "the list is not numbered (ordered: true)")
    steps["props"]["ordered"] = True
    assert _verdict(request, steps)[0]
    assert _verdict("Show the steps to brew coffee as a list.", {**steps, "props": {**steps["props"], "ordered": False}})[0]


def test_quoted_text_must_be_shown():
    request = "Show an alert card saying \"Payment failed\" with a retry button."
    card = {"type": "Card", "props": {"title": "Payment"}, "children": [_button("Retry")]}
    assert _verdict(request, card) == (False, "the tree does not show 'Payment failed'")
    card["props"]["title"] = "Payment failed!"
    assert _verdict(request, card)[0]


@pytest.mark.parametrize("request_text, tree, twice", [
    ("Render a table of plans with columns Name, Plan.",
     {"type": "Table", "props": {"columns": ["Name", "Plan", "Name"], "rows": []}},
     "the Table shows 'name' twice in its columns"),
    ("Render a table of plans with columns Name, Plan.",
     {"type": "Table", "props": {"columns": ["Name", "Plan"], "rows": [["a", "b"], ["a", "b"]]}},
     "the Table repeats a row"),
    ("Show my todo list as a list.", {"type": "List", "props": {"title": "Todo", "items": ["Milk", "Eggs", "milk"]}},
     "the List shows 'milk' twice in its items"),
])
def test_an_entry_shown_twice_is_not_the_answer(request_text, tree, twice):
    from mint.harness.genui import request_problem

    assert request_problem(request_text, tree, True) == twice


def test_a_word_that_says_what_kind_of_card_it_is_is_not_a_label():
    request = "Make a KPI card showing Uptime: 99%, with a report button."
    card = {"type": "Card", "props": {"title": "Uptime"}, "children": [
        {"type": "Text", "props": {"text": "99%"}}, _button("Open report")]}
    assert _verdict(request, card)[0]


def test_repair_drops_what_the_catalog_does_not_allow_and_the_verifier_judges_the_rest():
    from mint.harness.genui import repair, verify

    request = "Show a profile card for Ana Silva with a photo and a message button."
    answer = json.dumps({"type": "Card", "props": {"title": "Ana Silva", "gap": 8}, "children": [
        {"type": "Image", "props": {"src": "a.png", "alt": "Ana", "width": "full"}},
        {"type": "Avatar", "props": {"name": "Ana"}},                      # no such component
        {"type": "Button", "props": {"label": "Message"}},                # no action: refused whatever is dropped
        {"type": "Button", "props": {"label": "Message", "action": "msg", "variant": "loud"}}]})
    assert not verify(request, answer)[0]
    fixed = repair(answer)
    assert json.loads(fixed) == {"type": "Card", "props": {"title": "Ana Silva"}, "children": [
        {"type": "Image", "props": {"src": "a.png", "alt": "Ana"}},
        {"type": "Button", "props": {"label": "Message", "action": "msg"}}]}
    assert verify(request, fixed)[0]
    # dropping cannot make up what is missing: a card without its button stays refused
    bare = json.dumps({"type": "Card", "props": {"title": "Ana Silva", "gap": 8},
                       "children": [{"type": "Image", "props": {"src": "a.png", "alt": "Ana"}}]})
    assert repair(bare) is not None and not verify(request, repair(bare))[0]


def test_repair_gives_a_node_the_children_written_inside_its_props():
    from mint.harness.genui import repair, verify

    request = "Show an alert card saying \"Payment failed\" with a retry button."
    answer = ('{"type": "Card", "props": {"title": "Payment failed", "children": '
              '[{"type": "Button", "props": {"label": "Retry", "action": "retry"}}]}}')
    assert not verify(request, answer)[0]
    assert json.loads(repair(answer)) == {"type": "Card", "props": {"title": "Payment failed"}, "children": [
        {"type": "Button", "props": {"label": "Retry", "action": "retry"}}]}
    assert verify(request, repair(answer))[0]


def test_only_what_the_page_shows_counts_as_shown():
    # "Orders" only in the image's address and the button's action: the page never says it
    request = "Show a stat card for Orders today at 96 with a refresh button."
    card = {"type": "Card", "props": {"title": "Oders today"}, "children": [
        {"type": "Image", "props": {"src": "https://img.example.com/orders.png", "alt": "Orders today"}},
        {"type": "Text", "props": {"text": "96"}}, _button("Refresh", "refresh:orders")]}
    assert _verdict(request, card) == (False, "the tree does not show 'Orders'")
    # a field's name is not shown either: its label must say what the request calls it
    request = "Make a settings section with a dropdown for my video quality (Auto, High) and a save button."
    select = {"type": "Select", "props": {"label": "Same", "name": "video", "options": ["Auto", "High"]}}
    assert _verdict(request, {"type": "Stack", "props": {"direction": "vertical"}, "children": [
        select, _button("Save")]}) == (False, "no dropdown for 'video quality'")


def test_a_word_is_matched_whole_not_by_its_first_letters():
    request = "Make a notification card that says \"Password changed\" and has an undo button."
    card = {"type": "Card", "props": {"title": "Password changed"}, "children": [_button("Undownload")]}
    assert _verdict(request, card) == (False, "no button for 'undo'")
    card["children"] = [_button("Undo")]
    assert _verdict(request, card)[0]
    # one word written together with a particle or a word of its own is still that word
    assert _verdict("Show a login card with an email field and a log in button.", {
        "type": "Card", "props": {"title": "Login"}, "children": [_field("Email"), _button("Login")]})[0]


@pytest.mark.parametrize("columns, rows, why", [
    (["Room", "Floor"], [["1", "Beds"]], "the Table has no column 'Beds'"),     # in a cell, not a column
    (["Room", "Floor", "Beds", "Caption"], [["1", "2", "3", "x"]],
     "the Table has a column the request does not name: 'Caption'"),
    (["Room", "Floor", "Beds"], [["1", "2"]], "a row of the Table has 2 cell(s) for 3 column(s)"),
])
def test_a_table_shows_exactly_the_columns_the_request_lists_and_fills_them(columns, rows, why):
    request = "Render a table of rooms with columns Room, Floor, Beds and the caption \"Free tonight\"."
    table = {"type": "Table", "props": {"caption": "Free tonight", "columns": columns, "rows": rows}}
    assert _verdict(request, table) == (False, why)
    assert _verdict(request, {"type": "Table", "props": {"caption": "Free tonight", "columns": ["Room", "Floor", "Beds"],
                                                         "rows": [["1", "2", "3"]]}})[0]


def test_a_control_the_request_does_not_ask_for_is_not_the_answer():
    request = "Make a notification card that says \"Password changed\" and has an undo button."
    card = {"type": "Card", "props": {"title": "Password changed"}, "children": [
        {"type": "Select", "props": {"label": "Choose", "name": "c", "options": ["Password"]}}, _button("Undo")]}
    assert _verdict(request, card) == (False, "a Select the request does not ask for")
    # a part the request names (the button) is not a field or a dropdown it asks for
    request = "Make a KPI card showing Uptime: 99%, with an export button."
    card = {"type": "Card", "props": {"title": "Uptime"}, "children": [
        {"type": "Text", "props": {"text": "99%"}}, _button("Export"),
        {"type": "Select", "props": {"label": "Priority", "name": "p", "options": ["Text", "Image"]}}]}
    assert _verdict(request, card) == (False, "a Select the request does not ask for")
    assert _verdict(request, {**card, "children": card["children"][:2]})[0]
    # where the request names its buttons, another button is not one of them ("Log in" is not "Log out")
    request = "Make a card that asks \"Log out now?\" with a Cancel button and a Log out button."
    card = {"type": "Card", "props": {"title": "Log out now?"}, "children": [
        _button("Cancel"), _button("Log in", "in"), _button("Log out", "out")]}
    assert _verdict(request, card) == (False, "a button the request does not ask for: 'Log in'")
    card["children"] = [_button("Cancel"), _button("Log in", "in")]
    assert _verdict(request, card) == (False, "no button for 'Log out'")
    # where it names none, a button says one of its words: "Save" for "... and save it", not "Reward"
    request = "Build a settings page section where I pick my theme and save it."
    section = {"type": "Stack", "props": {"direction": "vertical"}, "children": [
        {"type": "Select", "props": {"label": "Theme", "name": "theme", "options": ["Light", "Dark"]}}, _button("Save")]}
    assert _verdict(request, section)[0]
    section["children"].append(_button("Reward", "reward"))
    assert _verdict(request, section) == (False, "a button the request does not ask for: 'Reward'")


def test_a_title_that_says_nothing_of_the_request_is_not_the_answer():
    request = "Make a notification card that says \"Password changed\" and has an undo button."
    card = {"type": "Card", "props": {"title": "Powers up"}, "children": [
        {"type": "Text", "props": {"text": "Password changed"}}, _button("Undo")]}
    assert _verdict(request, card) == (False, "the Card title 'Powers up' says nothing of the request")


def test_a_web_address_shown_as_text_is_not_the_answer():
    request = "Show a profile card for Omar Chen, our chef, with a photo and a hire button."
    card = {"type": "Card", "props": {"title": "Omar Chen"}, "children": [
        {"type": "Image", "props": {"src": "https://img.example.com/chen.png", "alt": "Omar Chen"}},
        {"type": "Text", "props": {"text": "Hire: https://img.example.com/henkel.png"}}, _button("Hire now")]}
    assert _verdict(request, card) == (False, "the tree shows a web address as text: "
                                              "'hire: https://img.example.com/henkel.png'")
    card["children"][1] = {"type": "Text", "props": {"text": "Chef"}}
    assert _verdict(request, card)[0]


def test_one_label_on_a_field_and_a_button_is_shown_twice():
    request = "Make a sign-in card with a username field, a password field and a sign in button."
    card = {"type": "Card", "props": {"title": "Sign in"}, "children": [
        _field("Username"), _field("Password"), _field("Sign in", "login"), _button("Sign in")]}
    assert _verdict(request, card) == (False, "the label 'sign in' is on a field and a button")


def _stat_card(title, value, button="Refresh"):
    return {"type": "Card", "props": {"title": title}, "children": [
        {"type": "Text", "props": {"text": value, "variant": "heading"}}, _button(button)]}


@pytest.mark.parametrize("request_text, value, passes", [
    ("Show a stat card for Orders today at 96 with a refresh button.", "96", True),
    ("Show a stat card for Orders today at 96 with a refresh button.", "$96", False),     # not the value stated
    ("Make a KPI card showing Avg wait: 6 min, with a refresh button.", "6 min", True),
    ("Make a KPI card showing Avg wait: 6 min, with a refresh button.", "6", False),      # its unit left out
    ("Make a KPI card showing Conversion: 3%, with a refresh button.", "3", False),
    ("Make a KPI card showing Net profit: $12k, with a refresh button.", "$12k", True),
    ("Show a product card for the Rook chair priced at $25 with a refresh button.", "$25.00", True),
])
def test_a_value_the_request_states_is_shown_as_stated(request_text, value, passes):
    title = request_text.split(" for ")[-1].split(" showing ")[-1].split(" at ")[0].split(":")[0]
    ok, why = _verdict(request_text, _stat_card(title.replace("the ", ""), value))
    assert ok is passes, why
    if not passes:
        assert why.startswith("the tree does not show ")


def test_a_text_that_says_nothing_of_the_request_is_not_the_answer():
    request = "Show a stat card for Signups at 412 with a refresh button."
    assert _verdict(request, _stat_card("Signups", "412"))[0]
    card = _stat_card("Signups at 412", "Rewards")
    assert _verdict(request, card) == (False, "the text 'Rewards' says nothing of the request")
    card = _stat_card("Upload failed", "${message}", "Retry")
    assert _verdict("Show an alert card saying \"Upload failed\" with a retry button.", card) == (
        False, "the text '${message}' says nothing of the request")


def test_one_text_shown_twice_is_not_the_answer():
    request = "Show an alert card saying \"Low battery\" with a dismiss button."
    assert _verdict(request, _stat_card("Low battery", "Plug in your charger soon", "Dismiss")) == (
        False, "the text 'Plug in your charger soon' says nothing of the request")
    assert _verdict(request, _stat_card("Battery", "Low battery", "Dismiss"))[0]
    assert _verdict(request, _stat_card("Low battery", "Low battery", "Dismiss")) == (
        False, "the tree shows 'Low battery' twice")
    nested = {"type": "Card", "props": {"title": "Low battery"}, "children": [
        {"type": "Card", "props": {"title": "Low battery"}}, _button("Dismiss")]}
    assert _verdict(request, nested) == (False, "the tree shows 'Low battery' twice")


def test_a_request_that_leaves_the_content_to_the_answer_takes_any_text():
    card = {"type": "Card", "props": {"title": "Weather in Oslo"}, "children": [
        {"type": "Text", "props": {"text": "Sunny, 12 C"}}]}
    assert _verdict("Show a weather card for Oslo.", card)[0]


def test_a_genui_request_family_is_the_root_component_it_names_and_other_harnesses_name_none():
    from mint.harness import HarnessSettings, harness_for

    genui = harness_for("genui", HarnessSettings())
    record = lambda text: {"messages": [{"role": "system", "content": "Answer with one tree."},   # noqa: E731
                                        {"role": "user", "content": text}]}
    assert genui.family(record("Show a stat card for Inventory at 880 with a history button.")) == "Card"
    assert genui.family(record('Make an alert card that says "Upload failed" and has a retry button.')) == "Card"
    # the root is the first component named before `with`, as the verifier reads it: a form, not a table
    assert genui.family(record("Show a form to book a table with name and date fields.")) == "Form"
    assert genui.family(record("Say hello to the team.")) is None                # names no component
    assert harness_for("chat", HarnessSettings()).family(record("Show a stat card.")) is None


def test_a_repaired_answer_keeps_the_layout_it_was_written_in():
    # a repaired answer becomes a training example: compact answers (the logs' layout) stay compact
    from mint.harness.genui import repair

    spaced = ('{"type": "Card", "props": {"title": "Payment failed", "children": '
              '[{"type": "Button", "props": {"label": "Retry", "action": "retry"}}]}}')
    compact = json.dumps(json.loads(spaced), separators=(",", ":"))
    assert repair(compact) == ('{"type":"Card","props":{"title":"Payment failed"},"children":'
                               '[{"type":"Button","props":{"label":"Retry","action":"retry"}}]}')
    assert repair(spaced) == json.dumps(json.loads(repair(compact)))
