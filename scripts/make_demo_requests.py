"""Write the GenUI requests users send after the logs were collected: traffic that drifted from the logs.

The logs (scripts/make_example_logs.py) hold six request families: forms of text fields, product cards, tables,
charts, lists and settings sections. What users ask next moves to families the logs cover thinly or not at all
(a form whose button says what it does, a dropdown with its choices named, a profile or alert card, a list that
is numbered...). Each family below is a few phrasings over pools of subjects, so that no two requests are the
same and a request names its parts the way a user would; the GenUI verifier (mint.harness.genui.verify) judges
each answer from the request alone, so nobody writes an answer. Which families ship was decided by measurement:
the demo's generation 1 must solve them sometimes but not often (see recipes/demo.yaml's header).

Files written (each request in no log, no held-out file, and in one file only; the script refuses a clash):
  examples/requests/genui.jsonl             the demo's generation-2 traffic, served through `mint serve`: a mixture
                                            a deployment would see (TRAFFIC below), whose held-out half
                                            (mint.data.split) contracts/genui.yaml gates on
  examples/heldout/genui-drift.jsonl        the first drift's families, held out: the retention suite of
                                            contracts/genui-second-drift.yaml (never served, never trained on)
  examples/requests/genui-generation-3.jsonl the second drift (other families), for scripts/bench_selfimprove.py's
                                            generation 3: 96 requests, about half on each side of the split
  examples/heldout/genui-drift-2.jsonl      the second drift, held out: what generation 3 is measured on
  contracts/suites/genui_old_families.jsonl the logs' six families with subjects nobody logged, with their trees
                                            (scripts/make_example_logs.py builds them as it builds the logs'): the
                                            retention suite of the contract that gates on the drifted traffic

The demo's traffic (examples/requests/genui.jsonl, TRAFFIC_MIX): 120 requests in a shuffled order, 60% of them
(72: the 48 served before and 24 more) the first drift (stat and alert cards with a named button: within
generation 1's reach), 20% (24) the logs' six families with subjects nobody logged (forms, product cards, tables,
charts, lists, settings sections: what generation 1 already knows) and 20% (24) compositions far beyond it
(dashboards, checkout forms, pricing sections, settings cards: several named parts each). Every one is routed to
GenUI by mint.yaml's rules, and every far family has a tree the verifier passes (the script checks both). The
demo holds out half of what it serves (recipes/demo.yaml `traffic: {heldout: 0.5}`, mint.data.split): 64
requests (39 first drift, 15 logs' families, 10 far beyond), of which contracts/genui.yaml reads the newest 47
(what its `detect: 0.2` needs); the other 56 (33, 9, 14) are what experience samples.

Run: python scripts/make_demo_requests.py
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "requests" / "genui.jsonl"
HELDOUT_OUT = ROOT / "examples" / "heldout" / "genui-drift.jsonl"
RETENTION_OUT = ROOT / "contracts" / "suites" / "genui_old_families.jsonl"
GENERATION_3_OUT = ROOT / "examples" / "requests" / "genui-generation-3.jsonl"
HELDOUT_2_OUT = ROOT / "examples" / "heldout" / "genui-drift-2.jsonl"
SYSTEM = "Answer with one UI4A JSON component tree and nothing else."

FIRST = ["Maya", "Omar", "Lena", "Tariq", "Ines", "Kofi", "Priya", "Jonas", "Aiko", "Mateo", "Sofia", "Ravi",
         "Elena", "Yusuf", "Clara", "Diego", "Hana", "Felix", "Nadia", "Bruno", "Zara", "Emil", "Leila", "Tomas"]
LAST = ["Chen", "Haddad", "Novak", "Okafor", "Silva", "Mensah", "Rao", "Berg", "Tanaka", "Ruiz", "Moreau",
        "Iyer", "Petrov", "Demir", "Larsen", "Costa", "Sato", "Weber", "Karimi", "Alves", "Fischer", "Nunez"]
ROLES = ["data engineer", "product designer", "nurse", "sales lead", "civil engineer", "chef", "teacher",
         "photographer", "support agent", "architect", "pilot", "pharmacist", "librarian", "barista"]
PROFILE_VERBS = ["message", "follow", "contact", "call", "hire", "connect", "invite"]
PURPOSES = ["rent a bike", "book a massage", "order flowers", "join the choir", "request a repair",
            "sign up for yoga", "apply for a grant", "reserve a court", "adopt a cat", "plan a trip",
            "report an outage", "book a tasting", "claim a prize", "join the beta", "ask for a quote",
            "enter the contest", "request a sample", "book a tour"]
FIELDS = ["name", "email", "phone", "address", "city", "notes", "company", "age", "country", "website"]
FORM_BUTTONS = ["send", "register", "apply", "book", "join", "request", "continue", "order", "reserve", "enter"]
SETTINGS = [("theme", ["Light", "Dark", "Sepia"]), ("language", ["English", "Spanish", "Hindi"]),
            ("currency", ["Dollar", "Euro", "Yen"]), ("font size", ["Small", "Medium", "Large"]),
            ("units", ["Metric", "Imperial"]), ("start day", ["Monday", "Sunday"]),
            ("map style", ["Streets", "Satellite", "Terrain"]), ("video quality", ["Auto", "High", "Low"]),
            ("privacy", ["Public", "Friends", "Private"]), ("refresh rate", ["Hourly", "Daily", "Weekly"]),
            ("time format", ["12-hour", "24-hour"]), ("home screen", ["Feed", "Inbox", "Calendar"])]
PRODUCTS = ["Cobalt lamp", "Fern planter", "Nova headset", "Pebble speaker", "Ridge backpack", "Saffron candle",
            "Terra mug", "Umber wallet", "Vale blender", "Wren stool", "Yarrow scarf", "Zinc bottle",
            "Alder shelf", "Birch tray", "Cinder grill", "Delta drone"]
PRODUCT_BUTTONS = ["add to cart", "preorder", "compare", "save", "rent", "gift", "reserve", "subscribe"]
ALERTS = [("Payment failed", "retry"), ("Storage almost full", "upgrade"), ("New version available", "update"),
          ("Session expired", "log in"), ("Backup complete", "view"), ("Password changed", "undo"),
          ("Order shipped", "track"), ("Card declined", "retry"), ("Trial ending soon", "upgrade"),
          ("Upload failed", "retry"), ("Invite sent", "undo"), ("Report ready", "download"),
          ("Low battery", "dismiss"), ("Meeting in 5 minutes", "join"), ("Draft saved", "open"),
          ("Price dropped", "buy"), ("Sync paused", "resume"), ("New follower", "view"),
          ("Server is down", "restart"), ("Disk check passed", "dismiss"), ("Delivery delayed", "track"),
          ("Subscription renewed", "manage"), ("Message deleted", "undo"), ("Update installed", "restart"),
          ("Flight boarding now", "check in"), ("Coupon expires today", "redeem"), ("Seat available", "book"),
          ("Refund issued", "view"), ("Download paused", "resume"), ("Login from a new device", "review"),
          ("Parcel at the door", "confirm"), ("Quota reached", "upgrade"), ("Class starts soon", "join"),
          ("Photo uploaded", "share"), ("Bill due tomorrow", "pay"), ("Task overdue", "snooze")]
ALERT_KINDS = ["alert", "notification"]
METRICS = [("Monthly revenue", "$840"), ("Active users", "1200"), ("Open tickets", "37"), ("Churn", "4%"),
           ("Orders today", "96"), ("Conversion", "3%"), ("Uptime", "99%"), ("Signups", "412"),
           ("Refunds", "$75"), ("Avg wait", "6 min"), ("Net profit", "$12k"), ("Page views", "8400"),
           ("Bounce rate", "41%"), ("New leads", "58"), ("Cart size", "$64"), ("Return rate", "2%"),
           ("Calls handled", "230"), ("Downloads", "5100"), ("Open orders", "19"), ("Satisfaction", "92%"),
           ("Daily visitors", "3100"), ("Late deliveries", "7"), ("Avg rating", "4.6"), ("Inventory", "880")]
STAT_BUTTONS = ["details", "report", "export", "refresh", "history", "share", "compare", "drill down"]
STEP_LISTS = ["steps to brew coffee", "steps to set up the printer", "stages of the hiring process",
              "steps to plant a tree", "steps to file an expense", "onboarding tasks", "steps to change a tire",
              "steps to reset the router", "steps to bake bread", "steps to book a meeting room",
              "steps to return an order", "chores for Saturday", "steps to renew a passport", "warm-up exercises",
              "steps to publish a post", "steps to close the shop"]
TABLES = [("invoices", ["Invoice", "Client", "Total"]), ("rooms", ["Room", "Floor", "Beds"]),
          ("drivers", ["Driver", "Car", "Rating"]), ("repos", ["Repo", "Stars", "Language"]),
          ("courses", ["Course", "Seats", "Start"]), ("shifts", ["Nurse", "Ward", "Hours"]),
          ("loans", ["Borrower", "Book", "Due"]), ("trips", ["Trip", "Driver", "Fare"]),
          ("tenants", ["Tenant", "Unit", "Rent"]), ("matches", ["Home", "Away", "Score"])]
CAPTIONS = ["Unpaid this month", "Free tonight", "On shift", "Most popular", "Open for enrollment", "Overdue",
            "Today", "This week", "Needs review", "Top ten"]
CHART_WHATS = ["rainfall", "signups", "sales", "visitors", "budget", "downloads", "calls", "weight", "returns",
               "page views"]
CHART_LABELS = [["Jan", "Feb", "Mar"], ["Mon", "Tue", "Wed", "Thu"], ["North", "South", "West"],
                ["Q1", "Q2", "Q3", "Q4"], ["Rent", "Food", "Travel"], ["iOS", "Android", "Web"],
                ["Morning", "Noon", "Evening"], ["June", "July", "August"]]


def _a(word: str) -> str:
    """``word`` with its indefinite article."""
    return ("an " if word[0] in "aeiou" else "a ") + word


def _listed(words: list[str], last: str = "and") -> str:
    return ", ".join(words[:-1]) + f" {last} " + words[-1] if len(words) > 1 else words[0]


def profile_card(rng: random.Random) -> str:
    name, role, verb = f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.choice(ROLES), rng.choice(PROFILE_VERBS)
    return rng.choice([f"Show a profile card for {name}, {role}, with a photo and {_a(verb)} button.",
                       f"Make a profile card for {name} ({role}) with a photo and {_a(verb)} button.",
                       f"Create a team member card for {name}, our {role}, with a photo and {_a(verb)} button."])


def form_button(rng: random.Random) -> str:
    purpose, verb = rng.choice(PURPOSES), rng.choice(FORM_BUTTONS)
    fields = _listed(rng.sample(FIELDS, rng.randint(2, 3)))
    return rng.choice([f"Make a form to {purpose} with {fields} fields and {_a(verb)} button.",
                       f"Create a form to {purpose} with {fields} fields and {_a(verb)} button."])


def settings_dropdown(rng: random.Random) -> str:
    setting, options = rng.choice(SETTINGS)
    choices = _listed(options, "or")
    return rng.choice([f"Build a settings section with a dropdown for my {setting} ({choices}) and a save button.",
                       f"Build a settings page section with a {setting} dropdown ({choices}) and a save button."])


def product_action(rng: random.Random) -> str:
    product, price, verb = rng.choice(PRODUCTS), rng.choice([14, 29, 49, 89, 120, 310]), rng.choice(PRODUCT_BUTTONS)
    return f"Show a product card for the {product} priced at ${price} with a photo and {_a(verb)} button."


def alert_card(rng: random.Random) -> str:
    (message, verb), kind = rng.choice(ALERTS), rng.choice(ALERT_KINDS)
    return rng.choice([f"Show {_a(kind)} card saying \"{message}\" with {_a(verb)} button.",
                       f"Make {_a(kind)} card that says \"{message}\" and has {_a(verb)} button."])


def stat_card(rng: random.Random) -> str:
    (metric, value), verb = rng.choice(METRICS), rng.choice(STAT_BUTTONS)
    return rng.choice([f"Show a stat card for {metric} at {value} with {_a(verb)} button.",
                       f"Make a KPI card showing {metric}: {value}, with {_a(verb)} button."])


def numbered_list(rng: random.Random) -> str:
    title = rng.choice(STEP_LISTS)
    return rng.choice([f"Show the {title} as a numbered list.", f"Show my {title} as an ordered list."])


def table_caption(rng: random.Random) -> str:
    (name, columns), caption = rng.choice(TABLES), rng.choice(CAPTIONS)
    return f"Render a table of {name} with columns {', '.join(columns)} and the caption \"{caption}\"."


def chart_labels(rng: random.Random) -> str:
    what, labels, kind = rng.choice(CHART_WHATS), rng.choice(CHART_LABELS), rng.choice(["bar", "line", "pie"])
    return f"Plot {what} for {_listed(labels)} as a {kind} chart."


FAMILIES: dict[str, Callable[[random.Random], str]] = {
    f.__name__: f for f in (profile_card, form_button, settings_dropdown, product_action, alert_card, stat_card,
                            numbered_list, table_caption, chart_labels)}
# Which families ship, by measurement (the demo's generation 1, 8 samples per request at the experience step's
# temperature 0.8, its verified repair counted; docs/benchmarks.md has every family's figures): the first drift is
# the families generation 1 solves sometimes but not often (pass@1 about 0.1-0.2, pass@8 0.3-0.7); the second
# drift, for generation 3, the families it solves at most once in 8 (cards with a photo, a table with a caption),
# which the first drift's skill (a card with its text and a button that says what it does) brings nearer.
# Forms with a named button, dropdowns with named choices and numbered lists stay out: generation 1 never solved
# one, so its experience holds nothing to learn from.
DRIFT = ("stat_card", "alert_card")
SECOND_DRIFT = ("profile_card", "product_action", "table_caption")


# --- the demo's traffic: the families far beyond generation 1, each with a tree its verifier passes ----------

DASH_CHARTS = ["revenue", "signups", "latency", "traffic", "sales", "errors", "returns", "visits", "bookings"]
DASH_TABLES = ["recent orders", "open tickets", "top customers", "failed jobs", "new leads", "late shipments",
               "active trials", "pending refunds"]
DASH_BUTTONS = ["refresh", "export", "share", "filter"]
CHECKOUT_FIELDS = ["email", "address", "postcode", "phone", "city", "name"]
SHIPPING = [["Standard", "Express"], ["Pickup", "Courier"], ["Economy", "Priority"], ["Ground", "Overnight"]]
CHECKOUT_BUTTONS = ["pay", "purchase", "confirm", "checkout"]
PLANS = ["Basic", "Plus", "Pro", "Team", "Starter", "Business", "Studio", "Scale"]
PLAN_BUTTONS = ["choose", "select", "start", "upgrade"]
CARD_SETTINGS = [("language", ["English", "French"]), ("timezone", ["UTC", "CET"]), ("theme", ["Light", "Dark"]),
                 ("currency", ["Euro", "Dollar"]), ("units", ["Metric", "Imperial"]), ("region", ["Europe", "Asia"])]
CARD_FIELDS = ["email", "nickname", "phone", "website"]
CARD_BUTTONS = ["save", "apply", "update"]


def _node(component: str, **props) -> dict:
    return {"type": component, "props": props}


def _field(label: str) -> dict:
    return _node("TextField", label=label.capitalize(), name=label.replace(" ", "_"), inputType="text", required=True)


def dashboard(rng: random.Random) -> tuple[str, dict]:
    chart, table, verb = rng.choice(DASH_CHARTS), rng.choice(DASH_TABLES), rng.choice(DASH_BUTTONS)
    request = f"Build a dashboard card with a {chart} chart, a table of {table} and {_a(verb)} button."
    return request, {**_node("Card", title="Dashboard"), "children": [
        _node("Chart", title=chart.capitalize(), kind="line", labels=["Mon", "Tue", "Wed"],
              series=[{"name": chart, "values": [3, 5, 4]}]),
        _node("Table", caption=table.capitalize(), columns=["Name", "Status"], rows=[["A", "Open"], ["B", "Done"]]),
        _node("Button", label=verb.capitalize(), action=verb)]}


def checkout_form(rng: random.Random) -> tuple[str, dict]:
    fields, options, verb = rng.sample(CHECKOUT_FIELDS, 3), rng.choice(SHIPPING), rng.choice(CHECKOUT_BUTTONS)
    request = (f"Make a checkout form with {_listed(fields)} fields, a shipping dropdown ({_listed(options, 'or')}) "
               f"and {_a(verb)} button.")
    return request, {**_node("Form", title="Checkout", submitLabel=verb.capitalize()), "children": [
        *(_field(f) for f in fields), _node("Select", label="Shipping", name="shipping", options=options)]}


def pricing_section(rng: random.Random) -> tuple[str, dict]:
    plans, verb = rng.sample(PLANS, 3), rng.choice(PLAN_BUTTONS)
    prices = sorted(rng.sample([5, 9, 12, 19, 29, 49, 79, 99], 3))
    listed = _listed([f"{plan} at ${price}" for plan, price in zip(plans, prices)])
    request = f"Show a pricing section with three plan cards, {listed}, each with {_a(verb)} button."
    return request, {**_node("Stack", direction="horizontal", gap=8), "children": [
        {**_node("Card", title=plan), "children": [_node("Text", text=f"${price}", variant="heading"),
                                                   _node("Button", label=f"{verb.capitalize()} {plan}",
                                                         action=f"{verb}:{plan.lower()}")]}
        for plan, price in zip(plans, prices)]}


def settings_card(rng: random.Random) -> tuple[str, dict]:
    (setting, options), field, verb = rng.choice(CARD_SETTINGS), rng.choice(CARD_FIELDS), rng.choice(CARD_BUTTONS)
    request = (f"Make a settings card with a {setting} dropdown ({_listed(options, 'or')}), {_a(field)} field and "
               f"{_a(verb)} button.")
    return request, {**_node("Card", title="Settings"), "children": [
        _node("Select", label=setting.capitalize(), name=setting, options=options), _field(field),
        _node("Button", label=verb.capitalize(), action=verb)]}


FAR = {f.__name__: f for f in (dashboard, checkout_form, pricing_section, settings_card)}
# the logs' six families with subjects nobody logged (scripts/make_example_logs.py's phrasings)
OLD_FAMILY_SUBJECTS = {
    "purposes": ["rent a canoe", "join the chess club", "request a site visit", "apply for the night shift"],
    "products": ["Aspen kettle", "Cobble speaker", "Drift lantern", "Harbor tote"],
    "tables": [("invoices due", ["Invoice", "Client", "Due"]), ("pets", ["Pet", "Owner", "Visit"]),
               ("routes", ["Route", "Stops", "Driver"]), ("donors", ["Donor", "Gift", "Year"])],
    "charts": [("rain by week", "bar", ["W1", "W2", "W3"]), ("calls per hour", "line", ["9h", "12h", "15h"]),
               ("budget split", "pie", ["Rent", "Food", "Fun"]), ("steps per day", "line", ["Mon", "Tue", "Wed"])],
    "lists": [("packing list for the trip", ["Boots", "Map"]), ("songs to learn", ["Blackbird", "Vincent"]),
              ("questions for the interview", ["Salary", "Team size"]), ("herbs to plant", ["Mint", "Sage"])],
    "settings": [("alarm sound", ["Beep", "Birds", "Radio"]), ("video resolution", ["480p", "720p", "1080p"]),
                 ("photo backup", ["Wifi only", "Always"]), ("reading mode", ["Paged", "Scroll"])]}
# the traffic's mixture: (kind, how many); the first drift takes the 48 requests served before, and more
TRAFFIC_MIX = (("first drift", 72), ("logs' families", 24), ("far beyond", 24))
TRAFFIC_HELDOUT = 0.5           # recipes/demo.yaml's `traffic: {heldout: ...}`


def family_requests(families: tuple[str, ...], count: int, rng: random.Random, taken: set[str]) -> list[str]:
    """``count`` new requests, the families taking turns, none in ``taken`` (normalized), which grows."""
    from mint.loop.experience import normalized_text

    out, turn, misses = [], 0, 0
    while len(out) < count:
        request = FAMILIES[families[turn % len(families)]](rng)
        key = normalized_text(request)
        if key in taken:
            misses += 1
            if misses > 10_000:
                raise SystemExit(f"the families {families} cannot make {count} distinct requests")
            continue
        taken.add(key)
        out.append(request)
        turn += 1
    return out


def known_requests(root: Path = ROOT) -> set[str]:
    """Every quoted string longer than 20 characters in ``root``'s examples/heldout and examples/logs."""
    seen = set()
    paths = list((root / "examples" / "heldout").glob("*.jsonl")) + list((root / "examples" / "logs").glob("*"))
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
        seen.update(part for part in text.split('"') if len(part) > 20)
    return seen


def clashes(rows: list[str], known: set[str]) -> list[str]:
    """The requests of ``rows`` that appear in one of the ``known`` strings."""
    return [r for r in rows if any(r in k for k in known)]


def write_requests(path: Path, rows: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for request in rows:
            f.write(json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": request}]}) + "\n")


SERVED, HELDOUT, GENERATION_3, HELDOUT_2 = 48, 96, 48, 96
# generation 3's batch grew by this many when the traffic's held-out share became half (recipes/selfimprove.yaml):
# of its first 48, 31 fall on the held-out side, so experience would have sampled 17
GENERATION_3_MORE = 48


def routed_elsewhere(rows: list[str]) -> list[str]:
    """The requests mint.yaml's rules do not send to GenUI outright (the mixture routes the demo's traffic by them)."""
    from mint.routing.router import Rules
    from mint.project import DEFAULT_PROJECT

    rules = Rules(DEFAULT_PROJECT)
    return [r for r in rows if (route := rules.certain(r, False)) is None or route.specialist != "genui"]


def traffic_requests(served: list[str], taken: set[str], rng: random.Random) -> tuple[list[str], dict]:
    """The demo's traffic (TRAFFIC_MIX), shuffled, none in ``taken`` (which grows), and each request's kind."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from make_example_logs import genui_family_cases

    from mint.harness.genui import verify
    from mint.loop.experience import normalized_text

    wanted = dict(TRAFFIC_MIX)
    drift = served + family_requests(DRIFT, wanted["first drift"] - len(served), rng, taken)
    old = [request for request, _tree in genui_family_cases(rng, OLD_FAMILY_SUBJECTS)]
    far, turn = [], 0
    while len(far) < wanted["far beyond"]:
        request, tree = FAR[list(FAR)[turn % len(FAR)]](rng)
        if normalized_text(request) in taken:
            continue
        passed, why = verify(request, json.dumps(tree))
        if not passed:
            raise SystemExit(f"no tree the verifier passes for {request!r} ({why}): a family far beyond generation 1 "
                             "must still be one a model can answer")
        taken.add(normalized_text(request))
        far.append(request)
        turn += 1
    if len(old) != wanted["logs' families"]:
        asked = wanted["logs' families"]
        raise SystemExit(f"OLD_FAMILY_SUBJECTS makes {len(old)} requests, TRAFFIC_MIX asks for {asked}")
    for request in old:
        if normalized_text(request) in taken:
            raise SystemExit(f"{request!r} is already logged, held out or served")
        taken.add(normalized_text(request))
    kinds = {**{r: "first drift" for r in drift}, **{r: "logs' families" for r in old},
             **{r: "far beyond" for r in far}}
    rows = drift + old + far
    rng.shuffle(rows)
    return rows, kinds


def build() -> tuple[dict[Path, list[str]], list[tuple[str, dict]], dict[str, str]]:
    """Every request file's requests (by path), the retention suite's (request, tree) pairs, and each traffic
    request's kind (TRAFFIC_MIX); SystemExit on a clash with the logs, the held-out files or each other, or a
    traffic request mint.yaml's rules do not route to GenUI."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from make_example_logs import genui_retention_cases

    from mint.loop.experience import normalized_text

    rng = random.Random(20261203)
    known = known_requests()
    # the files written here are not "known" to this check: they are what it writes
    for path in (HELDOUT_OUT, HELDOUT_2_OUT, RETENTION_OUT):
        known -= set(path.read_text().split('"')) if path.is_file() else set()
    taken = {normalized_text(k) for k in known}
    heldout = family_requests(DRIFT, HELDOUT, rng, taken)
    served = family_requests(DRIFT, SERVED, rng, taken)
    generation_3 = family_requests(SECOND_DRIFT, GENERATION_3, rng, taken)
    heldout_2 = family_requests(SECOND_DRIFT, HELDOUT_2, rng, taken)
    retention = genui_retention_cases(random.Random(20261204))
    clash = [r for r, _tree in retention if normalized_text(r) in taken]
    taken |= {normalized_text(r) for r, _tree in retention}
    # the demo's traffic, from a generator of its own, so every file written before it stays as it was
    traffic_rng = random.Random(20261206)
    traffic, kinds = traffic_requests(served, taken, traffic_rng)
    generation_3 += family_requests(SECOND_DRIFT, GENERATION_3_MORE, traffic_rng, taken)
    clash += clashes(traffic + heldout + generation_3 + heldout_2 + [r for r, _tree in retention], known)
    if clash:
        raise SystemExit(f"these requests already appear in examples/logs or examples/heldout, or twice: {clash}")
    elsewhere = routed_elsewhere(traffic)
    if elsewhere:
        raise SystemExit(f"mint.yaml's rules do not route these to GenUI: {elsewhere}")
    return {OUT: traffic, HELDOUT_OUT: heldout, GENERATION_3_OUT: generation_3, HELDOUT_2_OUT: heldout_2}, \
        retention, kinds


def main() -> None:
    from mint.data.split import is_heldout

    files, retention, kinds = build()
    for path, rows in files.items():
        write_requests(path, rows)
        print(f"wrote {len(rows)} requests to {path.relative_to(ROOT)}")
    for kind, _count in TRAFFIC_MIX:
        mine = [r for r in files[OUT] if kinds[r] == kind]
        held = sum(is_heldout({"messages": [{"role": "user", "content": r}]}, TRAFFIC_HELDOUT) for r in mine)
        print(f"  {kind}: {len(mine)} served, {held} held out at {TRAFFIC_HELDOUT:g}, {len(mine) - held} for experience")
    with open(RETENTION_OUT, "w", encoding="utf-8") as f:
        for request, tree in retention:
            f.write(json.dumps({"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": request}],
                                "reference": tree}, ensure_ascii=False) + "\n")
    print(f"wrote {len(retention)} requests with their trees to {RETENTION_OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
