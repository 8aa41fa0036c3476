"""Why mint splits a JSON array file with its own scanner (mint.data.readers._json_values) and not ijson.

Run: python scripts/bench_json_values.py [--records 20000]
Prints, for a ShareGPT-like array of RECORDS conversations with one broken record in the middle: how many
records each reader hands on, whether it says on which line each starts, and seconds (best of 3) on the
same file without the broken record. ijson is the well-kept streaming JSON parser (Inspect AI depends on it).
"""
from __future__ import annotations

import argparse
import io
import json
import time


def records(n: int) -> list[dict]:
    return [{"id": i, "conversations": [{"from": "human", "value": f"question {i} " * 8},
                                        {"from": "gpt", "value": f"answer {i} \u00e9\u4e2d " * 12}],
             "score": i % 5 + 0.5} for i in range(n)]


def array_text(rows: list[dict], broken_at: int | None) -> str:
    parts = [json.dumps(r, ensure_ascii=False, indent=1) for r in rows]
    if broken_at is not None:
        parts[broken_at] = parts[broken_at].replace('"score":', '"score" ', 1)    # one missing colon
    return "[\n" + ",\n".join(parts) + "\n]\n"


def by_scanner(text: str) -> tuple[int, int, bool]:
    from mint.data.readers import _json_values

    good = bad = 0
    lines = True
    for line, value, _size, note in _json_values(io.StringIO(text)):
        try:
            json.loads(value) if not note and value is not None else None
            good += not note
            bad += bool(note)
        except ValueError:
            bad += 1
        lines = lines and isinstance(line, int)
    return good, bad, lines


def by_ijson(text: str) -> tuple[int, int, bool]:
    import ijson

    good = bad = 0
    try:
        for _item in ijson.items(io.BytesIO(text.encode()), "item", use_float=True):
            good += 1
    except ijson.JSONError:
        bad += 1       # the parse stops here: every later record is lost with it
    return good, bad, False   # ijson's events carry no position


def seconds(fn, text: str) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20000)
    n = parser.parse_args().records
    rows = records(n)
    broken, clean = array_text(rows, n // 2), array_text(rows, None)
    print(f"{n} records, one broken at record {n // 2 + 1}; clean file {len(clean.encode()) / 1e6:.1f} MB")
    for name, fn in (("mint scanner + json.loads", by_scanner), ("ijson.items", by_ijson)):
        good, bad, lines = fn(broken)
        print(f"{name:28s} read {good:6d}, quarantined {bad}, lost {n - good - bad:6d}, "
              f"line numbers: {'yes' if lines else 'no'}; clean file {seconds(fn, clean):.2f} s")


if __name__ == "__main__":
    main()
