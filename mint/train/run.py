"""A training run: check the request, resolve everything into ``$MINT_HOME/runs/<run>/``, train with TRL +
PEFT, register.

The steps, each a function: ``check_request`` (every name, key and value, before torch, transformers or
TRL is imported and before anything is written), ``prepare_run`` (the settings in effect, the examples,
the chat template, written as one directory), ``mint.train.trainer.run_training`` (load the base,
``build_trainer``, ``execute``, ``save_result``) and ``register_run``.

The run directory holds ``run.json`` (what ran: data version, base, parent, method, every TRL and LoRA
setting, and under ``effective`` what was actually used: the chat template, the LoRA configuration of a
``--from`` parent, the backend), ``examples.jsonl`` (the exact rows trained on), ``metrics.jsonl`` (one
line per logged step: loss, reward, learning rate, tokens/s; one per checkpoint with its adapter's hash),
``checkpoints/`` (adapter, optimizer, scheduler and RNG state) and, at the end, ``adapter/``. A killed run
continues with ``mint train --resume RUN`` from its last checkpoint: same examples, same settings, same
adapter weights (checked against the hash recorded when the checkpoint was saved), same optimizer state.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from mint.base import SMOLLM2, TINY, check_base_name, load_tokenizer, training_chat_template
from mint.data.datasets import heldout_rule, iter_episodes, list_names, resolve_version
from mint.errors import BadInput, MintError
from mint.hardware import joins_rows_uncut
from mint.harness import check_harnesses
from mint.project import load_project
from mint.registry.artifacts import load_revision, register
from mint.registry.refs import check_name
from mint.text import closest
from mint.train.config import SettingsOverride, TrainSettings, UserSettings, check_settings, resolve_settings
from mint.train.envs import load_environment
from mint.train.examples import METHODS, build_examples, per_turn_rows
from mint.train.rundir import (EXAMPLES_FILE, METRICS_FILE, RESULT_FILE, RUN_FILE, TEMPLATE_FILE,  # noqa: F401
                               TrainProgress, phase)
from mint.workspace import Workspace, atomic_dir, atomic_write_json

MINT_TEMPLATE = "mint: SmolLM2 ChatML with generation markers, tools in the agent harness's words"


@dataclass(frozen=True)
class TrainRequest:
    """What was asked on the command line (or by a recipe)."""
    specialist: str | None = None
    data: str | None = None
    method: str | None = None
    from_ref: str | None = None
    base: str | None = None
    config: Path | None = None
    sets: tuple[str, ...] = ()
    env: str | None = None
    resume: str | None = None
    num_processes: int = 1
    accelerate_config: Path | None = None
    override: SettingsOverride | None = None    # settings as values (a recipe's), laid over ``sets``


@dataclass(frozen=True)
class TrainPlan:
    """A checked request: every name resolved, every setting typed; nothing written yet. (A dry run's plan may
    lack the specialist and the dataset: it shows the settings without them.)"""
    specialist: str | None
    method: str
    dataset: str | None           # NAME@VERSION (the full version hash), or None for an environment's own tasks
    env: str | None
    user: UserSettings
    base: str
    parent_id: str | None
    parent_ref: str | None
    parent_dir: str | None
    harness: str | None = None    # the specialist's harness (mint.yaml's ``harness:``): its default GRPO reward


@dataclass
class TrainResult:
    ref: str
    revision_id: str
    run: str
    run_dir: str
    method: str
    steps: int
    examples: int
    metrics: dict
    resumed_from_step: int | None
    warnings: list[str] = field(default_factory=list)


def train(ws: Workspace, *, specialist: str | None = None, data: str | None = None, method: str | None = None,
          from_ref: str | None = None, base: str | None = None, config: Path | None = None,
          sets: list[str] | None = None, resume: str | None = None, num_processes: int = 1,
          accelerate_config: Path | None = None, env: str | None = None,
          override: SettingsOverride | None = None, progress: TrainProgress | None = None) -> TrainResult:
    """Check the request, prepare the run (or find the one to resume), train, register the adapter: a
    generator's training (mint.train.kinds picks the trainer of each kind)."""
    request = TrainRequest(specialist, data, method, from_ref, base, config, tuple(sets or ()), env, resume,
                           num_processes, accelerate_config, override)
    if request.resume:
        run_dir = check_resume(ws, request)
    else:
        plan = check_request(ws, request)
        phase(progress, "preparing the examples")
        run_dir = prepare_run(ws, plan)
    from mint import tracking as trackers

    tracked = trackers.current(load_project())
    training = trackers.start_training(ws, tracked, run_dir, json.loads((run_dir / RUN_FILE).read_text()))
    try:
        with trackers.training_env(training):
            result = _train_prepared(run_dir, request, progress)
        registered = register_run(ws, run_dir, result)
    except BaseException:
        trackers.finish_training(ws, tracked, training, revision=None, metrics={}, failed=True)
        raise
    trackers.finish_training(ws, tracked, training, revision=registered.ref, metrics=registered.metrics)
    return registered


def _train_prepared(run_dir: Path, request: TrainRequest, progress: TrainProgress | None) -> dict:
    """Train the run prepared at ``run_dir``, in this process or in several; its result record."""
    if request.num_processes > 1 or request.accelerate_config:
        phase(progress, f"training in {request.num_processes} processes")
        _launch(run_dir, request.num_processes, request.accelerate_config, resume=bool(request.resume))
        check_world_size(run_dir, request.num_processes)
        return json.loads((run_dir / RESULT_FILE).read_text())
    from mint.train.trainer import run_training

    try:
        return run_training(run_dir, progress=progress, resume=bool(request.resume))
    except BadInput:
        # refused before the first step (a setting the loaded base cannot take): no run to resume
        if not request.resume:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


@dataclass
class ExampleYield:
    """What a dataset yields for a method (``mint train --dry-run``): how many examples (pairs for dpo,
    labelled answers for kto, prompts for grpo, conversations for sft) and why episodes gave none."""

    method: str
    dataset: str
    specialist: str
    examples: int
    needed: int
    left_out: dict[str, int]


def planned_examples(ws: Workspace, *, specialist: str | None, data: str | None, method: str | None) -> ExampleYield:
    """The examples a run of ``method`` on ``data`` for ``specialist`` would train on, without training."""
    from mint.train.examples import MINIMUM, left_out, method_rows

    if method not in METHODS:
        raise BadInput(f"unknown method {method!r}{closest(method, METHODS)} (methods: {', '.join(METHODS)})",
                       field="--method")
    if not specialist:
        raise BadInput("which specialist? (the examples are counted for one)", field="--specialist")
    name, _, version = (data or "").partition("@")
    known = list_names(ws)
    if name not in known:
        raise BadInput(f"no dataset {name!r}{closest(name, known)} (datasets: {', '.join(known) or 'none yet'})",
                       field="--data")
    _directory, manifest = resolve_version(ws, name, version or None, field="--data")
    reasons: dict[str, int] = {}
    mine = []
    held = heldout_rule(ws)     # the split `mint train` reads through (mint.data.split)
    for episode in iter_episodes(ws, name, manifest["version"]):
        if episode["specialist"] != specialist:
            why = f"labelled {episode['specialist']}, not {specialist}"
        elif held(episode):
            why = "held-out split (contract suites draw it; training never sees it)"
        else:
            mine.append(episode)
            continue
        reasons[why] = reasons.get(why, 0) + 1
    reasons.update(left_out(method, mine))
    return ExampleYield(method, f"{name}@{manifest['version']}", specialist, len(method_rows(method, mine)),
                        MINIMUM[method], reasons)


# --- step 1: check the request (light: no torch, transformers or TRL) --------------------------------
# (this module imports only mint's light modules at the top: TRL and torch come with mint.train.trainer,
# imported once a request has passed, so a mistake is answered in a fraction of a second)

def check_request(ws: Workspace, request: TrainRequest, *, dry_run: bool = False) -> TrainPlan:
    """Every argument checked against what exists; BadInput (exit 2) naming the field, with a
    did-you-mean where there is a near name. Imports nothing heavy and writes nothing.

    ``dry_run`` (``mint train --dry-run``) runs the same checks on every argument given, so a dry run refuses
    what the run would; it only does not ask for the specialist and the dataset, which the settings do not need."""
    if request.num_processes < 1:
        raise BadInput("must be at least 1", field="--num-processes")
    if request.accelerate_config:
        check_accelerate_config(request.accelerate_config, request.num_processes)
    if request.method is None:
        raise BadInput(f"which method? ({', '.join(METHODS)}) (or --resume RUN)", field="--method")
    if request.method not in METHODS:
        raise BadInput(f"unknown method {request.method!r}{closest(request.method, METHODS)} "
                       f"(methods: {', '.join(METHODS)})", field="--method")
    if not request.specialist and not dry_run:
        raise BadInput("which specialist does this train? (or --resume RUN)", field="--specialist")
    if request.specialist:
        check_name(request.specialist)
    environment = _check_env(request)
    user = check_settings(request.method, request.config, list(request.sets), request.override)
    dataset, in_dataset = None, []
    if request.data is not None:
        name, manifest = checked_dataset(ws, request.data)
        dataset = f"{name}@{manifest['version']}"
        in_dataset = sorted(manifest.get("by_specialist") or {})
    elif environment is None and not dry_run:
        raise BadInput("which dataset? DATASET or DATASET@VERSION", field="--data")
    elif not hasattr(environment, "tasks") and not dry_run:     # its prompts come from a dataset, then
        raise BadInput(f"--env {request.env} brings no tasks(): which dataset? DATASET or DATASET@VERSION",
                       field="--data")
    project = load_project()
    check_harnesses(project)
    # a specialist of mint.yaml, or one the dataset's episodes are labelled with (ingested under another project)
    specialists = sorted({*project.names, *in_dataset})
    if request.specialist and request.specialist not in specialists:
        where = f"{project.path}" if project.path else "mint.yaml (the default project)"
        raise BadInput(f"unknown specialist {request.specialist!r}{closest(request.specialist, specialists)} "
                       f"(specialists in {where}{' and the dataset' if in_dataset else ''}: "
                       f"{', '.join(specialists)})", field="--specialist")
    parent_id = parent_ref = parent_dir = None
    base = request.base
    if request.from_ref:
        parent, directory = load_revision(ws, request.from_ref)
        if request.specialist and parent.specialist != request.specialist:
            raise BadInput(f"{parent.ref} is a {parent.specialist} adapter, not {request.specialist}", field="--from")
        if base is not None and parent.base is not None and base != parent.base:
            raise BadInput(f"{parent.ref} was trained on base {parent.base}, not {base}", field="--base")
        lora_asked = set(user.lora_asked)
        if lora_asked:
            raise BadInput(f"--from continues {parent.ref}'s adapter with its own LoRA configuration; "
                           f"lora.{sorted(lora_asked)[0]} cannot change it (train without --from for a new adapter)",
                           field=f"lora.{sorted(lora_asked)[0]}")
        parent_id, parent_ref, parent_dir = parent.id, parent.ref, str(directory)
        base = base or parent.base
    if base is None:
        base = project.base
    check_base_name(base)
    return TrainPlan(request.specialist, request.method, dataset, request.env, user, base, parent_id, parent_ref,
                     parent_dir, project.harness_of(request.specialist) if request.specialist else None)


def checked_dataset(ws: Workspace, data: str) -> tuple[str, dict]:
    """``--data DATASET[@VERSION]``'s name and version manifest; BadInput naming the near name where it is none."""
    name, _, version = data.partition("@")
    known = list_names(ws)
    if name not in known:
        raise BadInput(f"no dataset {name!r}{closest(name, known)} (datasets: {', '.join(known) or 'none yet'}; "
                       f"create one with `mint ingest PATH --dataset {name}`)", field="--data")
    _directory, manifest = resolve_version(ws, name, version or None, field="--data")
    return name, manifest


def _check_env(request: TrainRequest):
    """The environment class, or None; an environment that brings its own tasks takes no --data."""
    if request.env is None:
        return None
    if request.method != "grpo":
        raise BadInput("--env trains with --method grpo", field="--env")
    environment = load_environment(request.env)
    if request.data is not None and hasattr(environment, "tasks"):
        # dataset rows carry no task for the environment's reward: it would score an empty goal
        raise BadInput(f"--env {request.env} brings its own tasks, and its reward needs each row's task, which "
                       "dataset rows do not have; drop --data (or use an environment without tasks())",
                       field="--data")
    return environment


def check_resume(ws: Workspace, request: TrainRequest) -> Path:
    """The run to continue. It continues with the settings it recorded, so any option that would change
    them is refused rather than ignored."""
    given = [flag for flag, value in (("--specialist", request.specialist), ("--data", request.data),
                                      ("--method", request.method), ("--from", request.from_ref),
                                      ("--base", request.base), ("--train-config", request.config),
                                      ("--set", request.sets or request.override), ("--env", request.env))
             if value]
    if given:
        raise BadInput(f"--resume continues run {request.resume} with the settings it recorded; {', '.join(given)} "
                       "cannot change them (start a new run to train with other settings)", field=given[0])
    if request.num_processes < 1:
        raise BadInput("must be at least 1", field="--num-processes")
    if request.accelerate_config:
        check_accelerate_config(request.accelerate_config, request.num_processes)
    return _find_run(ws, request.resume)


def _find_run(ws: Workspace, run: str) -> Path:
    path = Path(run)
    if not (path / RUN_FILE).is_file():
        path = ws.runs / run
    if not (path / RUN_FILE).is_file():
        known = sorted(p.name for p in ws.runs.iterdir()) if ws.runs.is_dir() else []
        raise BadInput(f"no run {run!r} (runs: {', '.join(known[-5:]) or 'none'})", field="--resume")
    if (path / RESULT_FILE).is_file() and json.loads((path / RESULT_FILE).read_text()).get("registered"):
        raise BadInput(f"run {path.name} finished and was registered already", field="--resume")
    return path


# --- step 2: prepare the run directory (settings in effect, examples, template) ----------------------

def prepare_run(ws: Workspace, plan: TrainPlan) -> Path:
    """The run directory with run.json, examples.jsonl and the chat template, written in one rename."""
    settings = resolve_settings(plan.user)
    rows = build_run_examples(ws, plan)
    template, template_source = resolve_chat_template(plan, settings)
    rows, settings, changed = rows_for_template(plan.method, rows, template_source, settings)
    key = reasoning_key(template if template is not None else own_chat_template(plan.base))
    rows, reasoning = reasoning_for_template(rows, key, settings.examples["reasoning"])
    settings, max_length = max_length_from_data(plan, settings, rows, template)
    effective = {"chat_template": {"source": template_source,
                                   "sha256": hashlib.sha256(template.encode()).hexdigest() if template else None},
                 "lora": effective_lora(plan, settings), "changed": changed,
                 **({"reasoning": reasoning} if reasoning["turns"] else {}),
                 **({"max_length": max_length} if max_length else {})}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"{plan.specialist}-{plan.method}-{stamp}-{os.getpid()}"
    run_dir, again = ws.runs / name, 2
    while run_dir.exists():       # a second run of this process within the same second
        run_dir, again = ws.runs / f"{name}-{again}", again + 1
    ws.runs.mkdir(parents=True, exist_ok=True)
    with atomic_dir(run_dir) as tmp:
        with open(tmp / EXAMPLES_FILE, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        if template is not None:
            (tmp / TEMPLATE_FILE).write_text(template, encoding="utf-8")
        record = {"run": run_dir.name, "specialist": plan.specialist, "harness": plan.harness,
                  "dataset": plan.dataset or f"env:{plan.env}", "env": plan.env, "method": plan.method,
                  "base": plan.base, "parent": plan.parent_id, "parent_ref": plan.parent_ref,
                  "examples": len(rows), "settings": asdict(settings), "config_hash": settings.digest(),
                  "effective": effective, "created_at": stamp}
        atomic_write_json(tmp / RUN_FILE, record)
    return run_dir


def example_tokens(tokenizer, row: dict, template: str | None) -> int:
    """How many tokens an SFT row is as TRL tokenizes it: its conversation (a prompt/completion row: both) under
    the chat template, with its tools."""
    messages = row["messages"] if "messages" in row else row["prompt"] + row["completion"]
    tools = row.get("tools")
    ids = tokenizer.apply_chat_template(messages, tools=json.loads(tools) if isinstance(tools, str) else tools,
                                        chat_template=template, tokenize=True, return_dict=True)["input_ids"]
    return len(ids)


def max_length_from_data(plan: TrainPlan, settings: TrainSettings, rows: list[dict],
                         template: str | None) -> tuple[TrainSettings, dict | None]:
    """(settings, why) with SFT's ``max_length`` the longest row's tokens, so that truncation never cuts an answer
    short; unchanged where the user set max_length (null: no limit) or the method is not SFT. TRL pads each batch
    to its own longest row, so a limit above the data's costs nothing and one below it cuts answers."""
    if plan.method != "sft" or "max_length" in plan.user.trl or not rows:
        return settings, None
    tokenizer = load_tokenizer(plan.base)
    lengths = [example_tokens(tokenizer, row, template) for row in rows]
    longest = max(lengths)
    median = sorted(lengths)[len(lengths) // 2]
    if joins_rows_uncut(settings.trl):
        # TRL's padding-free batches are never cut (it refuses a max_length without packing): each row is as long
        # as it is; the longest is recorded all the same
        return settings, {"value": None, "longest": longest,
                          "reason": f"padding-free batches cut no row (the longest of the {len(rows)} examples: "
                                    f"{longest} tokens, median {median})"}
    why = {"value": longest, "reason": f"the longest of the {len(rows)} examples, tokenized with the run's chat "
                                       f"template (median {median}): no example is cut"}
    return replace(settings, trl={**settings.trl, "max_length": longest}), why


def build_run_examples(ws: Workspace, plan: TrainPlan) -> list[dict]:
    """The rows the trainer takes: the dataset's episodes for the method, or the environment's tasks."""
    if plan.dataset is None:
        return list(load_environment(plan.env).tasks())
    name, _, version = plan.dataset.partition("@")
    return build_examples(plan.method, iter_episodes(ws, name, version, plan.specialist, split="train"),
                          dataset=f"{plan.dataset} ({plan.specialist})")


def resolve_chat_template(plan: TrainPlan, settings: TrainSettings) -> tuple[str | None, str]:
    """(the chat template to train with, or None for the base's own; where it comes from).

    Assistant-only loss needs ``{% generation %}`` markers: the built-in bases (and every tool-environment
    run) get mint's SmolLM2 template,
    a local base keeps its own when it has them, else TRL's training version of it; a template neither
    has is refused (exit 2) rather than quietly training on every token.
    """
    if plan.env is not None or plan.base in (SMOLLM2, TINY):
        # in a tool environment too: the tools are shown in the agent harness's words (as evaluation shows
        # them) under a neutral system prompt, and calls are written as <tool_call>{json}</tool_call>
        return training_chat_template(), MINT_TEMPLATE
    tokenizer = load_tokenizer(plan.base)
    own = tokenizer.chat_template
    if isinstance(own, dict):
        own = own.get("default")
    if not own:
        raise BadInput("this base has no chat template; add one (tokenizer_config.json chat_template)",
                       file=plan.base)
    if not (plan.method == "sft" and settings.trl.get("assistant_only_loss")):
        return None, "base"
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    try:
        patched = get_training_chat_template(tokenizer)
    except ValueError:
        patched = None
        if not has_generation_markers(own):
            raise BadInput("the base's chat template has no {% generation %} markers and TRL knows no training "
                           "version of it, so the loss cannot be kept to the assistant's turns; add "
                           "{% generation %}...{% endgeneration %} around assistant turns in its template, or "
                           "set trl.assistant_only_loss=false to train on every token",
                           field="trl.assistant_only_loss") from None
    if patched is None:
        return None, "base (has generation markers)"
    return patched, "TRL training template for the base's own"


# the message keys chat templates read an assistant turn's reasoning from (Qwen3, DeepSeek-R1, GLM: the first;
# gpt-oss: the second)
REASONING_KEYS = ("reasoning_content", "thinking")


def own_chat_template(base: str) -> str:
    """The chat template the base's tokenizer brings ("" when it has none)."""
    template = load_tokenizer(base).chat_template if base not in (SMOLLM2, TINY) else training_chat_template()
    if isinstance(template, dict):
        template = template.get("default")
    return template or ""


def reasoning_key(template: str) -> str | None:
    """The message key ``template`` renders an assistant's reasoning from, or None when it has no place for it."""
    for key in REASONING_KEYS:
        if re.search(rf"""(?:\.{key}\b|\[['"]{key}['"]\])""", template):   # m.thinking, message['thinking']
            return key
    return None


def reasoning_for_template(rows: list[dict], key: str | None, train: bool) -> tuple[list[dict], dict]:
    """(rows, what became of the reasoning they carry): each assistant turn's reasoning under the template's
    ``key``, where it has one and ``train`` (examples.reasoning) is on; else left out, and counted."""
    turns = 0

    def place(message: dict) -> dict:
        nonlocal turns
        if "reasoning" not in message:
            return message
        turns += 1
        out = {k: v for k, v in message.items() if k != "reasoning"}
        if key is not None and train:
            out[key] = message["reasoning"]
        return out

    placed = [{name: [place(m) for m in value] if isinstance(value, list) and value and isinstance(value[0], dict)
               else value for name, value in row.items()} for row in rows]
    trained = key is not None and train
    why = (f"rendered under `{key}` by the chat template" if trained else
           "left out: examples.reasoning is false" if key is not None else
           "left out: the chat template has no place for reasoning (reasoning_content or thinking)")
    return placed, {"turns": turns, "trained": turns if trained else 0, "left_out": 0 if trained else turns,
                    "why": why}


def rows_for_template(method: str, rows: list[dict], template_source: str,
                      settings: TrainSettings) -> tuple[list[dict], TrainSettings, dict]:
    """(rows, settings, what changed and why) for the chat template in use.

    SFT rows with turns not to train on (``weight: 0``) become one prompt/completion row per trained turn
    unless the template is mint's own, which leaves such turns out of the loss itself. TRL masks such rows
    by their completion, and refuses assistant_only_loss on them, so that setting is turned off and the
    change is recorded in run.json (``effective.changed``).
    """
    if method != "sft" or template_source == MINT_TEMPLATE or \
            not any(m.get("weight") == 0 for row in rows for m in row["messages"]):
        return rows, settings, {}
    changed = {"examples": "one prompt/completion row per trained assistant turn: the chat template cannot leave "
                           "weight-0 turns out of the loss"}
    trl_values = dict(settings.trl)
    if trl_values.get("assistant_only_loss"):
        trl_values["assistant_only_loss"] = False
        changed["trl.assistant_only_loss"] = "false: the loss falls on each row's completion (one assistant turn)"
    return per_turn_rows(rows), replace(settings, trl=trl_values), changed


def effective_lora(plan: TrainPlan, settings: TrainSettings) -> dict:
    """The LoRA configuration the adapter will have: the parent's own with --from, else the settings'."""
    if plan.parent_dir is None:
        return {"source": "settings", **settings.lora}
    config = json.loads((Path(plan.parent_dir) / "adapter_config.json").read_text())
    return {"source": f"parent {plan.parent_ref}", "r": config.get("r"), "alpha": config.get("lora_alpha"),
            "dropout": config.get("lora_dropout"), "target_modules": config.get("target_modules"),
            "layers_to_transform": config.get("layers_to_transform")}


# accelerate's distributed types that launch one process per device through torch.distributed.run; on a CPU
# (MULTI_CPU, or use_cpu) accelerate starts several processes only through mpirun (mpirun_hostfile, with
# Intel MPI or oneCCL), and without one its simple launcher starts ONE process whatever num_processes says
ACCELERATE_LAUNCHED = ("MULTI_GPU", "MULTI_NPU", "MULTI_XPU", "MULTI_MLU", "MULTI_HPU", "FSDP", "DEEPSPEED",
                       "MEGATRON_LM")


def check_accelerate_config(path: Path, num_processes: int) -> None:
    """Refuse an accelerate config file that would not start ``num_processes`` processes, before anything runs:
    accelerate launches a CPU config with more than one process only through mpirun."""
    from mint.yamlfile import load_yaml

    doc = load_yaml(Path(path))
    if not isinstance(doc.data, dict):
        raise doc.error("", "expected an accelerate config (a mapping, as `accelerate config` writes)")
    kind = doc.data.get("distributed_type", "NO")
    if not isinstance(kind, str):
        raise doc.error("distributed_type", "expected a string such as MULTI_GPU, FSDP or DEEPSPEED")
    on_cpu = doc.data.get("use_cpu") is True or kind.upper() in ("MULTI_CPU", "NO")
    if num_processes > 1 and on_cpu and not doc.data.get("mpirun_hostfile"):
        raise doc.error("distributed_type" if "distributed_type" in doc.data else "",
                        f"accelerate launch starts {num_processes} CPU processes only through mpirun "
                        "(`mpirun_hostfile`, with Intel MPI or oneCCL installed); with this file it would start one "
                        f"process. On a CPU use --num-processes {num_processes} without --accelerate-config "
                        "(torchrun, gloo backend), or give the file an mpirun_hostfile")
    if kind.upper() not in ACCELERATE_LAUNCHED + ("MULTI_CPU", "NO"):
        raise doc.error("distributed_type", f"unknown distributed_type {kind!r}{closest(kind, ACCELERATE_LAUNCHED)}")


def check_world_size(run_dir: Path, num_processes: int) -> None:
    """A multi-process run whose ranks did not form one process group of ``num_processes`` is an error: its
    adapter is not what was asked for (ranks that trained alone, or fewer of them), so it is not registered."""
    worlds = []
    for rank in range(num_processes):
        path = run_dir / f"rank{rank}.json"
        worlds.append(json.loads(path.read_text()).get("world_size") if path.is_file() else None)
    if any(world != num_processes for world in worlds):
        found = ", ".join(f"rank {r}: {'no record' if w is None else f'world size {w}'}" for r, w in enumerate(worlds))
        raise MintError(f"asked for {num_processes} processes in one process group, but the launch gave {found}; "
                        f"nothing was registered (see {run_dir})")


def _launch(run_dir: Path, num_processes: int, accelerate_config: Path | None, resume: bool) -> None:
    """Run the training in N processes (torchrun; accelerate with a config file), gloo on CPU."""
    worker = ["-m", "mint.train.worker", str(run_dir)] + (["--resume"] if resume else [])
    if accelerate_config:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config),
                   "--num_processes", str(num_processes), *worker]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                   str(num_processes), *worker]
    child = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if child.returncode != 0:
        raise MintError(f"the {num_processes}-process run exited with status {child.returncode}; "
                        f"see {run_dir} and continue it with `mint train --resume {run_dir.name}`")


# --- step 4: register the adapter --------------------------------------------------------------------

def _run_metrics(result: dict) -> dict:
    return {"train_loss": result.get("train_loss"), "steps": result.get("steps"),
            **{f"last_{k}": v for k, v in result.get("last", {}).items() if k in ("loss", "reward")}}


def _train_result(run_dir: Path, run: dict, result: dict, ref: str, revision_id: str) -> TrainResult:
    reasoning = (run.get("effective") or {}).get("reasoning") or {}
    notes = [f"{reasoning['left_out']} assistant turn(s)' reasoning {reasoning['why']}"] \
        if reasoning.get("left_out") else []
    return TrainResult(ref, revision_id, run_dir.name, str(run_dir), run["method"], result["steps"], run["examples"],
                       _run_metrics(result), result.get("resumed_from_step"),
                       notes + list(result.get("warnings") or []))


def register_run(ws: Workspace, run_dir: Path, result: dict) -> TrainResult:
    """The run's adapter as a candidate revision of its specialist; result.json marks the run registered."""
    run = json.loads((run_dir / RUN_FILE).read_text())
    fingerprint = result.get("base_fingerprint")
    metrics = _run_metrics(result)
    revision = register(ws, run_dir / "adapter", specialist=run["specialist"], parent=run["parent"],
                        base=run["base"], base_fingerprint=fingerprint, dataset=run["dataset"], method=run["method"],
                        recipe=None, config_hash=run["config_hash"],
                        metrics={k: v for k, v in metrics.items() if v is not None})
    atomic_write_json(run_dir / RESULT_FILE, {**result, "registered": True, "revision": revision.ref,
                                               "revision_id": revision.id})
    return _train_result(run_dir, run, result, revision.ref, revision.id)


def registered_run(ws: Workspace, *, specialist: str, dataset: str, method: str,
                   parent: str | None) -> TrainResult | None:
    """The newest run of ``specialist`` on ``dataset`` (NAME@VERSION) by ``method`` from ``parent`` (a revision id;
    None: from the base) whose revision is registered, as ``train`` returned it; None when there is none. A run
    killed between registering its revision and marking itself registered is marked now."""
    from mint.registry import queries

    runs = sorted(ws.runs.glob(f"{specialist}-{method}-*"), key=lambda p: p.name, reverse=True) \
        if ws.runs.is_dir() else []
    for run_dir in runs:
        try:
            run = json.loads((run_dir / RUN_FILE).read_text())
            result = json.loads((run_dir / RESULT_FILE).read_text())
        except (OSError, ValueError):
            continue      # a run killed before it finished (no result.json) registered nothing
        if (run.get("specialist"), run.get("dataset"), run.get("method"), run.get("parent")) != \
                (specialist, dataset, method, parent):
            continue
        if result.get("registered"):
            if queries.status(ws, result["revision_id"]) is not None:
                return _train_result(run_dir, run, result, result["revision"], result["revision_id"])
            continue
        revision = queries.trained_revision(ws, specialist=specialist, dataset=dataset, method=method,
                                            config_hash=run["config_hash"], parent=parent)
        if revision is not None and revision.metrics.get("steps") == result.get("steps"):
            atomic_write_json(run_dir / RESULT_FILE, {**result, "registered": True, "revision": revision.ref,
                                                       "revision_id": revision.id})
            return _train_result(run_dir, run, result, revision.ref, revision.id)
    return None
