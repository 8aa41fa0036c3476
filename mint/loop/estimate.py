"""How long a loop will take: each step's seconds estimated from its settings and this machine's probe, and the
whole run's remaining time corrected by what the finished steps measured.

A step's estimate is its work (training steps x rows a step, or tokens decoded) times what one unit of it costs
here: the hardware probe's matmul timings (mint.hardware, cached per machine) scaled by the base's size. The unit
costs are calibrated once against the demo's measured steps (docs/benchmarks.md, "The demo"), so a first estimate
is rough; after each step the remaining estimate is corrected by the ratio of measured to estimated seconds of
the steps done so far (``refine``), which carries this machine's and this day's speed into the rest. Training and
decoding are corrected apart: their unit costs miss by different factors on different hosts (on an AVX2-only host
the first estimate sized training 1.5 to 2.4 times short and decoding right), so a slow training step must not
stretch the decoding ahead. Inside a step, once it reports a tenth of its work done, its own pace says how long it
has left (``step_left``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# the probe's decoding matmul multiplies one row by SmolLM2's 576 x 1536 MLP weight: its cost per row is the
# cost of this many multiply-adds
PROBE_DECODING_MACS = 576 * 1536
PROBE_TRAINING_MACS = 512 * 512 * 512
# calibration against the demo's measured steps (SmolLM2, 2 cores): what the one-thread probe's figures miss
# (attention, sampling, Python, and the backward pass of a LoRA step over about this many tokens a row)
DECODE_OVERHEAD = 1.5
TRAINING_MACS_PER_PARAM_ROW = 3 * 40
# an answer ends where it is complete (a JSON value, a call): on average this share of its token limit is decoded
ANSWER_SHARE = 0.5
# what no setting sizes: loading a base and its adapters, building a trainer, registering a revision, writing a
# report
LOAD_S = 10.0
TRAINING_SETUP_S = 12.0
SMALL_STEP_S = 2.0
# the measured/estimated ratio starts from 1 as if this many estimated seconds had run as estimated: a few-second
# step that ran in a tenth of its estimate does not scale the rest of a half-hour run by a tenth
PRIOR_S = 60.0
# a router is trained from one prefill of every logged turn, about this many SmolLM2-sized tokens' work
ROUTE_TOKENS = 6_000
# a suite drawn from the workspace (a dataset's held-out split, the served traffic) has no file to count
LIVE_SUITE_EXAMPLES = 48
# the probe's timings where a machine has none (a GPU is not probed): a fast desktop core's
FALLBACK_TRAINING_MS, FALLBACK_DECODING_MS_PER_ROW = 3.0, 0.03


@dataclass(frozen=True)
class MachineRates:
    """What one unit of work costs on this machine, from its probe."""

    training_mac_s: float           # seconds per multiply-add of a training-shape matmul
    decoding_mac_s: float           # seconds per multiply-add of one decoding row, at ``rows`` rows a step
    rows: int                       # rows the decoding plan runs side by side
    source: str                     # where the figures come from, said with the estimate


@dataclass(frozen=True)
class Estimate:
    """One step of one iteration: its estimated seconds and what they were reckoned from."""

    iteration: int
    index: int
    label: str
    kind: str
    seconds: float
    basis: str
    training_s: float = 0.0         # the part of ``seconds`` that is training (the rest decodes or loads)


@dataclass(frozen=True)
class Eta:
    """The run's remaining time after the steps done so far: the estimate of the steps ahead times ``ratio``
    (measured / estimated seconds of the steps done; 1 before any)."""

    left_s: float
    ratio: float
    done_estimated_s: float
    done_measured_s: float
    training_ratio: float = 1.0     # measured / estimated seconds of the training done so far
    decoding_ratio: float = 1.0     # likewise of everything else (decoding, loading)


@dataclass(frozen=True)
class Done:
    """A step that ran: its estimate, the training part of it, and the seconds it took."""

    estimated_s: float
    training_s: float
    measured_s: float


def machine_rates(hardware=None) -> MachineRates:
    """This machine's unit costs, from ``mint.hardware.detect()``'s probe (measured once, cached)."""
    from mint.hardware import decoding_plan, detect

    hardware = hardware or detect()
    probe = hardware.probe or {}
    training_ms = (probe.get("training") or {}).get("fp32_ms") or FALLBACK_TRAINING_MS
    per_row = {int(k): v for k, v in (probe.get("decoding_rows_ms_per_row") or {}).items()}
    rows = decoding_plan(hardware)["rows"].value
    rows = rows if isinstance(rows, int) and rows >= 1 else max(per_row, default=8)
    row_ms = per_row.get(rows) or FALLBACK_DECODING_MS_PER_ROW
    source = f"probe of {hardware.device_name or hardware.device}, {hardware.cores} core(s)" if probe \
        else f"no probe on {hardware.device} (a desktop core's figures)"
    return MachineRates(training_ms / 1000 / PROBE_TRAINING_MACS, row_ms / 1000 / PROBE_DECODING_MACS, rows, source)


def base_parameters(base: str) -> int:
    """About how many weights a token passes through in ``base`` (its layers and output head), from its config
    alone: no weights are loaded."""
    from mint.base import TINY, TINY_LAYERS, resolve_base

    if base == TINY:
        hidden, inner, layers, vocab = 64, 128, TINY_LAYERS, 49152
    else:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(resolve_base(base)))
        hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
        inner = getattr(config, "intermediate_size", 4 * hidden)
    return layers * (4 * hidden * hidden + 3 * hidden * inner) + vocab * hidden


class StepSizer:
    """Each step kind's work, from its recipe settings and the files it names."""

    def __init__(self, recipe, rates: MachineRates, parameters: int) -> None:
        self.recipe, self.rates, self.parameters = recipe, rates, parameters

    def training(self, steps: int, batch: int) -> float:
        return TRAINING_SETUP_S + steps * batch * TRAINING_MACS_PER_PARAM_ROW * self.parameters * self.rates.training_mac_s

    def decoding(self, tokens: float) -> float:
        return LOAD_S + tokens * self.parameters * self.rates.decoding_mac_s * DECODE_OVERHEAD

    def estimate(self, step, iteration: int) -> Estimate:
        seconds, basis = getattr(self, f"_{step.kind}", self._small)(step)
        return Estimate(iteration, step.index, step.label, step.kind, round(seconds, 1), basis,
                        round(min(self._training_part(step), seconds), 1))

    def _training_part(self, step) -> float:
        """The seconds of ``step``'s estimate that train: a train step's, an experience step's sampler
        trainings, the controls' two trainings."""
        if step.kind == "train":
            return self.training(*self._train_steps(step))
        if step.kind in ("experience", "controls"):
            trainings = int(step.options.get("rounds", 1)) - 1 if step.kind == "experience" else 2
            return max(trainings, 0) * self.training(*(self._plan(step.specialist) or (1, 1)))
        return 0.0

    # one method per kind: (seconds, what they were reckoned from)
    def _small(self, step) -> tuple[float, str]:
        return SMALL_STEP_S, "a few registry and file operations"

    def _train(self, step) -> tuple[float, str]:
        steps, batch = self._train_steps(step)
        return self.training(steps, batch), f"{steps} training steps of {batch} rows"

    def _train_steps(self, step) -> tuple[int, int]:
        from mint.train.config import hardware_defaults

        defaults = hardware_defaults(step.options.get("method", "sft"))
        sets = step.options.get("set") or {}
        steps = int(sets.get("max_steps", sets.get("trl.max_steps", defaults["max_steps"])))
        batch = int(sets.get("per_device_train_batch_size", sets.get("trl.per_device_train_batch_size",
                                                                     defaults["per_device_train_batch_size"])))
        if step.options.get("plan") == "experience":
            planned = self._plan(step.specialist)
            if planned:
                steps, batch = planned
        return max(steps, 1), max(batch, 1)

    def _plan(self, specialist: str) -> tuple[int, int] | None:
        """The most steps (and the batch) an experience step of ``specialist`` plans for its next generation."""
        from mint.loop.placebo import PLAN_DEFAULTS

        for other in self.recipe.steps:
            if other.kind == "experience" and other.specialist == specialist:
                return (int(other.options.get("max_steps", PLAN_DEFAULTS["max_steps"])),
                        int(other.options.get("batch_size", PLAN_DEFAULTS["batch_size"])))
        return None

    def _experience(self, step) -> tuple[float, str]:
        o = step.options
        prompts, samples, tokens = int(o.get("prompts", 16)), int(o.get("samples", 4)), int(o.get("max_new_tokens", 256))
        rounds = int(o.get("rounds", 1))
        decoded = prompts * samples * tokens * ANSWER_SHARE
        seconds = rounds * self.decoding(decoded)
        basis = f"{rounds} round(s) of {prompts} prompts x {samples} samples x {tokens} tokens at most"
        if rounds > 1:
            steps, batch = self._plan(step.specialist) or (1, 1)
            seconds += (rounds - 1) * self.training(steps, batch)
            basis += f", {rounds - 1} sampler training(s) of {steps} steps"
        return seconds, basis

    def _eval(self, step) -> tuple[float, str]:
        examples, tokens, samples = self._suites(step.options["contract"], step.options.get("limit"))
        # the candidate and its baseline (a champion's answers in its report are reused, the base's are not)
        decoded = 2 * examples * samples * tokens * ANSWER_SHARE
        return self.decoding(decoded), f"2 revisions x {examples} examples x {tokens} tokens at most"

    def _suites(self, contract_path: str, limit: int | None, only_first: bool = False) -> tuple[int, int, int]:
        """(examples a contract decodes, its token limit, samples per example)."""
        from mint.contract.schema import load_contract

        contract = load_contract(self.recipe.path.parent / contract_path, check_data=False)
        examples = 0
        for suite in contract.suites[:1] if only_first else contract.suites:
            count = LIVE_SUITE_EXAMPLES if suite.live or suite.data is None else _lines(Path(suite.data))
            examples += min(c for c in (count, suite.limit, limit) if c is not None)
        return examples, contract.settings.max_new_tokens, max(contract.settings.samples, 1)

    def _controls(self, step) -> tuple[float, str]:
        contract = next((s.options["contract"] for s in self.recipe.steps
                         if s.kind == "eval" and s.specialist == step.specialist), None)
        steps, batch = self._plan(step.specialist) or (1, 1)
        seconds = 2 * self.training(steps, batch)
        basis = f"2 trainings of {steps} steps"
        if contract:
            examples, tokens, samples = self._suites(contract, step.options.get("limit"), only_first=True)
            seconds += self.decoding(2 * examples * samples * tokens * ANSWER_SHARE)
            basis += f", 2 revisions x {examples} examples decoded"
        return seconds, basis

    def _serve(self, step) -> tuple[float, str]:
        requests = _lines(self.recipe.path.parent / step.options["requests"])
        tokens = int(step.options.get("max_tokens", 256))
        return self.decoding(requests * tokens * ANSWER_SHARE), f"{requests} requests x {tokens} tokens at most"

    def _route(self, step) -> tuple[float, str]:
        return self.decoding(ROUTE_TOKENS), "one prefill of the logged turns and a linear probe"


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def estimate_run(recipe, iterations: range, rates: MachineRates, parameters: int) -> list[Estimate]:
    """Every step that runs in ``iterations`` (a step before its ``from_iteration`` or after its
    ``until_iteration`` is left out), estimated in order."""
    sizer = StepSizer(recipe, rates, parameters)
    return [sizer.estimate(step, iteration) for iteration in iterations for step in recipe.steps
            if step.runs_in(iteration)]


def refine(done: list[Done], ahead: list[Estimate]) -> Eta:
    """The remaining time: the training part of ``ahead``'s estimates times the ratio of measured to estimated
    training seconds of ``done``, the rest times the same ratio of the rest. A step's measured seconds are shared
    between its parts as its estimate shares them; each ratio is counted from PRIOR_S seconds run as estimated."""
    estimated = sum(d.estimated_s for d in done)
    measured = sum(d.measured_s for d in done)
    training_estimated = sum(d.training_s for d in done)
    training_measured = sum(d.measured_s * d.training_s / d.estimated_s for d in done if d.estimated_s > 0)
    training_ratio = (training_measured + PRIOR_S) / (training_estimated + PRIOR_S)
    decoding_ratio = (measured - training_measured + PRIOR_S) / (estimated - training_estimated + PRIOR_S)
    left = sum(training_ratio * e.training_s + decoding_ratio * (e.seconds - e.training_s) for e in ahead)
    return Eta(round(left, 1), round((measured + PRIOR_S) / (estimated + PRIOR_S), 3), round(estimated, 1),
               round(measured, 1), round(training_ratio, 3), round(decoding_ratio, 3))


# a running part of a step (its training, a decode) says how long it has left by its own pace once it has done this
# share of its work since it was first heard; before, the step's corrected estimate does
PACE_FROM = 0.1


def scaled(eta: Eta, estimate: Estimate) -> float:
    """``estimate``'s seconds corrected by ``eta``'s ratios."""
    return eta.training_ratio * estimate.training_s + eta.decoding_ratio * (estimate.seconds - estimate.training_s)


def pace_left(first: tuple[float, float], now: tuple[float, float]) -> float | None:
    """Seconds a part of a step has left at its pace: ``first`` and ``now`` are (seconds into the step, share of
    the part done) when it was first heard and now; None until it has done PACE_FROM of its work since."""
    (began, began_share), (seconds, share) = first, now
    progressed = share - began_share
    if progressed < PACE_FROM or share >= 1 or seconds <= began:
        return None
    return (seconds - began) * (1 - share) / progressed


def step_left(eta: Eta, estimate: Estimate | None, seconds: float, part_left: float | None) -> float:
    """How long the running step has left, ``seconds`` into it: its corrected estimate less the time it has run,
    and never less than what its running part has left at its own pace (a step running slower than estimated
    would otherwise say it is about done until it ends)."""
    planned = max(0.0, scaled(eta, estimate) - seconds) if estimate is not None else 0.0
    return max(planned, part_left or 0.0)


def eta_record(estimated_s: float | None, steps) -> list[dict]:
    """How the ETA fared, read back from a finished run's steps (``StepOutcome``s: ``elapsed_s`` and ``left_s``
    of each that ran): at the start and after each step, the share of the run done, the remaining seconds as
    estimated then and as they turned out, and the error (estimated / actual - 1)."""
    ran = [s for s in steps if s.elapsed_s is not None and s.left_s is not None]
    if estimated_s is None or not ran:
        return []
    total = ran[-1].elapsed_s
    points = [("start", 0.0, estimated_s)] + [(f"{s.iteration}: {s.label}", s.elapsed_s, s.left_s) for s in ran]
    record = []
    for after, elapsed, left in points:
        actual = round(total - elapsed, 1)
        record.append({"after": after, "share_done": round(elapsed / total, 3) if total else 1.0,
                       "left_s": left, "actual_left_s": actual,
                       "error": round(left / actual - 1, 3) if actual > 0 else None})
    return record
