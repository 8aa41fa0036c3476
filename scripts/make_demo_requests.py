"""Write examples/requests/genui.jsonl: new user requests the demo sends through the mixture.

Team-written, in the same shapes as the GenUI logs (forms, product cards, tables, charts, lists, settings) but
with purposes, products and data the logs and the held-out files never name, so that answering them is new
experience for the champion, not a copy of what it was trained on. Requests only: nobody wrote an answer, the
harness's reference-free verifier judges what the champion says. The script refuses a request that appears in
examples/logs or examples/heldout.

Run: python scripts/make_demo_requests.py
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "requests" / "genui.jsonl"
SYSTEM = "Answer with one UI4A JSON component tree and nothing else."


def requests(rng: random.Random) -> list[str]:
    fields = ["email", "password", "full name", "phone", "company", "city", "message", "date of birth"]
    purposes = ["create an account", "send feedback", "schedule a call", "order a pizza", "adopt a pet",
                "enter the raffle", "rent a car", "book a hotel room", "cancel my subscription",
                "change my email", "donate to the charity", "volunteer for the event"]
    out = [f"Make a form to {p} with " + ", ".join(rng.sample(fields, rng.randint(2, 4))) + " fields."
           for p in purposes]
    products = ["Juniper sofa", "Falcon scooter", "Glacier cooler", "Meadow blanket", "Onyx monitor",
                "Prism sunglasses", "Raven umbrella", "Sierra boots", "Tundra parka", "Zephyr kite"]
    out += [f"Show a product card for the {p} priced at ${rng.choice([15, 39, 59, 99, 199, 349])} with a buy button."
            for p in products]
    tables = [("customers", ["Name", "Plan", "Joined"]), ("refunds", ["Refund", "Order", "Amount"]),
              ("incidents", ["Incident", "Severity", "Owner"]), ("releases", ["Version", "Date", "Notes"]),
              ("bookings", ["Guest", "Room", "Nights"]), ("vendors", ["Vendor", "Contact", "Rating"]),
              ("courses", ["Course", "Teacher", "Credits"]), ("alerts", ["Alert", "Service", "Since"])]
    out += [f"Render a table of recent {n} with columns " + ", ".join(c) + "." for n, c in tables]
    charts = [("page views per day", "line"), ("sales by product", "bar"), ("traffic sources", "pie"),
              ("churn per month", "line"), ("bugs by severity", "bar"), ("storage by team", "pie")]
    out += [f"Plot {t} as a {k} chart." for t, k in charts]
    lists = ["errands for today", "release blockers", "movies to watch", "gift ideas", "interview questions",
             "hiking gear"]
    out += [f"Show my {t} as a list." for t in lists]
    settings = ["font size", "default view", "units", "week start day", "sound", "region"]
    out += [f"Build a settings page section where I pick my {s} and save it." for s in settings]
    return out


def known_requests() -> set[str]:
    seen = set()
    paths = list((ROOT / "examples" / "heldout").glob("*.jsonl")) + list((ROOT / "examples" / "logs").glob("*"))
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
        seen.update(part for part in text.split('"') if len(part) > 20)
    return seen


def main() -> None:
    rows = requests(random.Random(20261201))
    known = known_requests()
    clash = [r for r in rows if any(r in k for k in known)]
    if clash:
        raise SystemExit(f"these requests already appear in examples/logs or examples/heldout: {clash}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        for request in rows:
            f.write(json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": request}]}) + "\n")
    print(f"wrote {len(rows)} requests to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
