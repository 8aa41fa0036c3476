"""Write examples/requests/genui.jsonl and genui-generation-3.jsonl: new user requests served through the mixture.

Team-written, in the same shapes as the GenUI logs (forms, product cards, tables, charts, lists, settings) but
with purposes, products and data the logs and the held-out files never name, so that answering them is new
experience for the champion, not a copy of what it was trained on. Requests only: nobody wrote an answer, the
harness's reference-free verifier judges what the champion says. `make demo` serves genui.jsonl in its
generation 2; scripts/bench_selfimprove.py serves it in generation 2 and genui-generation-3.jsonl (the same
templates, other subjects) in generation 3, since experience leaves out prompts the training data already
answers. The script refuses a request that appears in examples/logs or examples/heldout, or in both files.

Run: python scripts/make_demo_requests.py
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "requests" / "genui.jsonl"
GENERATION_3_OUT = ROOT / "examples" / "requests" / "genui-generation-3.jsonl"
SYSTEM = "Answer with one UI4A JSON component tree and nothing else."

# the subjects each template is filled with: the demo's, and generation 3's (none of them repeated)
DEMO_SUBJECTS = {
    "fields": ["email", "password", "full name", "phone", "company", "city", "message", "date of birth"],
    "purposes": ["create an account", "send feedback", "schedule a call", "order a pizza", "adopt a pet",
                 "enter the raffle", "rent a car", "book a hotel room", "cancel my subscription",
                 "change my email", "donate to the charity", "volunteer for the event"],
    "products": ["Juniper sofa", "Falcon scooter", "Glacier cooler", "Meadow blanket", "Onyx monitor",
                 "Prism sunglasses", "Raven umbrella", "Sierra boots", "Tundra parka", "Zephyr kite"],
    "prices": [15, 39, 59, 99, 199, 349],
    "tables": [("customers", ["Name", "Plan", "Joined"]), ("refunds", ["Refund", "Order", "Amount"]),
               ("incidents", ["Incident", "Severity", "Owner"]), ("releases", ["Version", "Date", "Notes"]),
               ("bookings", ["Guest", "Room", "Nights"]), ("vendors", ["Vendor", "Contact", "Rating"]),
               ("courses", ["Course", "Teacher", "Credits"]), ("alerts", ["Alert", "Service", "Since"])],
    "charts": [("page views per day", "line"), ("sales by product", "bar"), ("traffic sources", "pie"),
               ("churn per month", "line"), ("bugs by severity", "bar"), ("storage by team", "pie")],
    "lists": ["errands for today", "release blockers", "movies to watch", "gift ideas", "interview questions",
              "hiking gear"],
    "settings": ["font size", "default view", "units", "week start day", "sound", "region"],
}
GENERATION_3_SUBJECTS = {
    "fields": ["username", "address", "zip code", "country", "job title", "website", "notes", "age"],
    "purposes": ["join the book club", "request a catalog", "report a lost item", "apply for the internship",
                 "reserve a campsite", "sign up for swimming lessons", "request a callback", "update my address",
                 "enroll in the workshop", "submit a bug report", "rate our support", "borrow a library book"],
    "products": ["Aurora lamp", "Obsidian kettle", "Cobalt backpack", "Dune hammock", "Hazel heater",
                 "Pine canoe", "Harbor blender", "Lagoon goggles", "Maple desk", "Velvet pillow"],
    "prices": [12, 25, 45, 79, 149, 299],
    "tables": [("invoices", ["Invoice", "Client", "Due"]), ("parcels", ["Parcel", "Courier", "Status"]),
               ("employees", ["Employee", "Team", "Start"]), ("escalations", ["Case", "Priority", "Agent"]),
               ("donations", ["Donor", "Amount", "Campaign"]), ("sensors", ["Sensor", "Reading", "Updated"]),
               ("patients", ["Patient", "Doctor", "Visit"]), ("deploys", ["Service", "Commit", "Time"])],
    "charts": [("signups per week", "line"), ("revenue by region", "bar"), ("energy use by building", "pie"),
               ("response time per hour", "line"), ("tickets by agent", "bar"), ("browsers used", "pie")],
    "lists": ["books to read", "bills to pay", "museums to visit", "camping checklist", "podcast episodes to catch up on",
              "recipes to try"],
    "settings": ["theme color", "notification email", "start page", "autoplay videos", "reading mode", "backup frequency"],
}


def requests(rng: random.Random, subjects: dict = DEMO_SUBJECTS) -> list[str]:
    fields = subjects["fields"]
    out = [f"Make a form to {p} with " + ", ".join(rng.sample(fields, rng.randint(2, 4))) + " fields."
           for p in subjects["purposes"]]
    out += [f"Show a product card for the {p} priced at ${rng.choice(subjects['prices'])} with a buy button."
            for p in subjects["products"]]
    out += [f"Render a table of recent {n} with columns " + ", ".join(c) + "." for n, c in subjects["tables"]]
    out += [f"Plot {t} as a {k} chart." for t, k in subjects["charts"]]
    out += [f"Show my {t} as a list." for t in subjects["lists"]]
    out += [f"Build a settings page section where I pick my {s} and save it." for s in subjects["settings"]]
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


def main() -> None:
    demo = requests(random.Random(20261201))
    generation_3 = requests(random.Random(20261202), GENERATION_3_SUBJECTS)
    known = known_requests()
    clash = clashes(demo + generation_3, known) + sorted(set(demo) & set(generation_3))
    if clash:
        raise SystemExit(f"these requests already appear in examples/logs or examples/heldout, or twice: {clash}")
    for path, rows in ((OUT, demo), (GENERATION_3_OUT, generation_3)):
        write_requests(path, rows)
        print(f"wrote {len(rows)} requests to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
