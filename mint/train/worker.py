"""One rank of a multi-process run: ``python -m mint.train.worker RUN_DIR [--resume]`` (torchrun starts N)."""
from __future__ import annotations

import sys
from pathlib import Path

from mint.train.trainer import run_training


def main() -> None:
    run_training(Path(sys.argv[1]), resume="--resume" in sys.argv[2:])


if __name__ == "__main__":
    main()
