"""A contract's ``harness:`` block: how its requests are framed (system prompt, template, tools, catalog) and how
its answers are decoded (tokens, temperature, batch, precision, stops). Here, below both, because the engine decodes
by it and every harness frames by it (mint.harness.base hands it to the harnesses)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HarnessSettings:
    """The ``harness:`` block of a contract."""

    system: str | None = None
    template: str = "{prompt}"          # how the user turn is written; {prompt} is the record's request
    tools: tuple[str, ...] | None = None   # agent: the only tools the model is shown and may call
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    samples: int = 1                    # outputs drawn per record (pass@k needs k <= samples)
    batch_size: int = 8
    timeout_s: float = 10.0             # coding: wall-clock limit per program
    catalog: Path | None = None         # genui: the UI4A catalog (JSON Schema)
    precision: str = "fp32"             # generation: fp32, bf16, int8, or auto (bf16 where the hardware runs it natively)
    stop_at_answer_end: bool = False    # generation: end a row once its answer is complete (mint.generation.stops)
    prompt_lookup: int = 0              # generation: greedy rows draft up to this many tokens a step (0: none)
