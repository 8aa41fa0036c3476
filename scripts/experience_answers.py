"""`mint` with the experience step's pool answered from a fixed table: what the kill -9 and full-disk suites run a loop
with experience and controls through (scripts/reliability_kill.py, scripts/reliability_disk.py).

Run:   python scripts/experience_answers.py loop RECIPE [--resume] ...   (any mint command line)

The tiny random base writes no valid GenUI tree, so its own pool would verify nothing, the next generation would
have no plan and its controls (the placebo twin and the steps control) would never train. Here each prompt's
samples are one valid tree for the request (``ANSWERS``) and broken text, so the step verifies one answer a prompt,
ingests the verified, twin and steps-control datasets, and the controls step trains both controls: every write the
step makes is reached. Everything else is mint as it runs.

With ``MINT_FILL_DISK_AT_SAMPLING=FILE``, the pool's sampling ends by filling the filesystem that holds FILE (writing
FILE until the disk refuses): the disk fills up while the step samples, as another process's writes would fill it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FILL_VARIABLE = "MINT_FILL_DISK_AT_SAMPLING"
# what each request of REQUESTS asks for, as the GenUI verifier judges it
ANSWERS = {"Show a signup form.": '{"type": "Form", "props": {"title": "Signup", "submitLabel": "Sign up"}, '
                                  '"children": [{"type": "TextField", "props": {"label": "Email", "name": "email", '
                                  '"inputType": "email", "required": true}}]}',
           "Show a weather card for Oslo.": '{"type": "Card", "props": {"title": "Weather in Oslo"}, "children": '
                                            '[{"type": "Text", "props": {"text": "Sunny, 12 C"}}]}'}
REQUESTS = "".join(f'{{"prompt": "{prompt}"}}\n' for prompt in ANSWERS)


def fill(path: Path) -> None:
    """Write ``path`` until its filesystem is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for block in (1 << 20, 4096, 1):   # big blocks, then smaller ones for the last bit
            try:
                while os.write(fd, b"\0" * block) == block:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def answered(ws, champion, base, specialist, chosen, *, samples: int, **_settings) -> list[list[str]]:
    """Each prompt's ``samples`` answers: its valid tree, then broken text."""
    pool = [[ANSWERS.get(prompt.prompt[-1]["content"], "{broken"), *["{broken"] * (samples - 1)] for prompt in chosen]
    filler = os.environ.get(FILL_VARIABLE)
    if filler:
        fill(Path(filler))
    return pool


def main(argv: list[str]) -> int:
    from mint.cli import main as mint
    from mint.loop import experience

    experience._sample = answered
    return mint(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
