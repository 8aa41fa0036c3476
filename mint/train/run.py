"""A training run: resolve everything into ``$MINT_HOME/runs/<run>/``, train with TRL + PEFT, register.

The run directory holds ``run.json`` (what ran: data version, base, parent, method and every TRL and
LoRA setting), ``examples.jsonl`` (the exact rows trained on), ``metrics.jsonl`` (one line per logged
step: loss, reward, learning rate, tokens/s), ``checkpoints/`` (adapter, optimizer, scheduler and RNG
state) and, at the end, ``adapter/``. A killed run continues with ``mint train --resume RUN`` from
its last checkpoint: same examples, same adapter weights, same optimizer state.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from mint.errors import BadInput, MintError
from mint.faults import checkpoint as fault_point
from mint.train.config import TrainSettings, resolve_settings, trl_config_class
from mint.train.examples import METHODS, build_examples
from mint.workspace import Workspace, atomic_write_json

# (step, max steps, latest logged values)
TrainProgress = Callable[[int, int, dict], None]
RUN_FILE, EXAMPLES_FILE, METRICS_FILE, RESULT_FILE = "run.json", "examples.jsonl", "metrics.jsonl", "result.json"


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


def runs_dir(ws: Workspace) -> Path:
    return ws.home / "runs"


def train(ws: Workspace, *, specialist: str | None = None, data: str | None = None, method: str | None = None,
          from_ref: str | None = None, base: str | None = None, config: Path | None = None,
          sets: list[str] | None = None, resume: str | None = None, num_processes: int = 1,
          accelerate_config: Path | None = None, env: str | None = None,
          progress: TrainProgress | None = None) -> TrainResult:
    if specialist == "router":   # the router is a probe on the base, not a LoRA: mint.mol trains it
        from mint.mol.router_training import train_router
        return train_router(ws, data=data, base=base, sets=sets)
    if num_processes < 1:
        raise BadInput("must be at least 1", field="--num-processes")
    if resume:
        run_dir = _find_run(ws, resume)
    else:
        run_dir = prepare_run(ws, specialist=specialist, data=data, method=method, from_ref=from_ref, base=base,
                              config=config, sets=sets or [], env=env)
    if num_processes > 1 or accelerate_config:
        _launch(run_dir, num_processes, accelerate_config, resume=bool(resume))
        result = json.loads((run_dir / RESULT_FILE).read_text())
    else:
        result = run_training(run_dir, progress=progress, resume=bool(resume))
    return _register(ws, run_dir, result)


def _find_run(ws: Workspace, run: str) -> Path:
    path = Path(run)
    if not (path / RUN_FILE).is_file():
        path = runs_dir(ws) / run
    if not (path / RUN_FILE).is_file():
        known = sorted(p.name for p in runs_dir(ws).iterdir()) if runs_dir(ws).is_dir() else []
        raise BadInput(f"no run {run!r} (runs: {', '.join(known[-5:]) or 'none'})", field="--resume")
    if (path / RESULT_FILE).is_file() and json.loads((path / RESULT_FILE).read_text()).get("registered"):
        raise BadInput(f"run {path.name} finished and was registered already", field="--resume")
    return path


def prepare_run(ws: Workspace, *, specialist, data, method, from_ref, base, config, sets, env=None) -> Path:
    from mint.data.datasets import iter_episodes, resolve_version
    from mint.registry.refs import check_name

    if env is not None and method != "grpo":
        raise BadInput("--env trains with --method grpo", field="--env")
    environment = None
    if env is not None:
        from mint.train.envs import load_environment
        environment = load_environment(env)
    if not (specialist and method and (data or (environment and hasattr(environment, "tasks")))):
        raise BadInput("--specialist, --data and --method are required (or --resume RUN)")
    check_name(specialist)
    if method not in METHODS:
        raise BadInput(f"unknown method {method!r} (expected {', '.join(METHODS)})", field="--method")
    settings = resolve_settings(method, config, sets)
    if environment is not None and hasattr(environment, "tasks") and not data:
        rows, dataset_label = environment.tasks(), f"env:{env}"
    else:
        name, _, version = data.partition("@")
        _directory, manifest = resolve_version(ws, name, version or None)
        dataset_label = f"{name}@{manifest['version']}"
        rows = build_examples(method, iter_episodes(ws, name, manifest["version"], specialist),
                              dataset=f"{dataset_label} ({specialist})")
    parent = None
    if from_ref:
        from mint.registry.artifacts import load_revision

        parent_revision, _ = load_revision(ws, from_ref)
        if parent_revision.specialist != specialist:
            raise BadInput(f"{parent_revision.ref} is a {parent_revision.specialist} adapter, not {specialist}",
                           field="--from")
        parent = parent_revision.id
        base = base or parent_revision.base
    if base is None:
        from mint.project import load_project
        base = load_project().base
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = runs_dir(ws) / f"{specialist}-{method}-{stamp}-{os.getpid()}"
    run_dir.mkdir(parents=True)
    with open(run_dir / EXAMPLES_FILE, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    record = {"run": run_dir.name, "specialist": specialist, "dataset": dataset_label, "env": env,
              "method": method, "base": base, "parent": parent, "examples": len(rows),
              "settings": asdict(settings), "config_hash": settings.digest(), "created_at": stamp}
    atomic_write_json(run_dir / RUN_FILE, record)
    return run_dir


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


def _adapter_digest(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted((n, p) for n, p in model.named_parameters() if "lora_" in n):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def run_training(run_dir: Path, *, progress: TrainProgress | None = None, resume: bool = False) -> dict:
    """Train the run in this process (one rank of several under torchrun); returns the result record."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import TrainerCallback

    from mint.base import SMOLLM2, TINY, load_base, training_chat_template

    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")   # environment_factory is experimental in TRL 1.x
    run = json.loads((run_dir / RUN_FILE).read_text())
    settings = TrainSettings(**{**run["settings"], "rewards": tuple(run["settings"]["rewards"])})
    method = run["method"]
    rows = [json.loads(line) for line in open(run_dir / EXAMPLES_FILE, encoding="utf-8")]
    loaded = load_base(run["base"])
    tokenizer, model = loaded.tokenizer, loaded.model
    trl_values = dict(settings.trl)
    if run["base"] in (SMOLLM2, TINY):
        tokenizer.chat_template = training_chat_template()
    elif method == "sft" and "{% generation %}" not in (tokenizer.chat_template or ""):
        trl_values["assistant_only_loss"] = False   # the base's own template cannot mark assistant tokens
    if method == "grpo":
        tokenizer.padding_side = "left"
    peft_config = None
    if run["parent"]:
        from mint.registry.artifacts import revision_dir
        from mint.registry import store
        from mint.workspace import workspace

        ws = workspace(run_dir.parent.parent)
        conn = store.open_store(ws, create=False)
        parent = store.get_revision(conn, run["parent"])
        conn.close()
        model = PeftModel.from_pretrained(model, str(revision_dir(ws, parent)), is_trainable=True)
    else:
        lora = settings.lora
        peft_config = LoraConfig(r=int(lora["r"]), lora_alpha=lora["alpha"], lora_dropout=float(lora["dropout"]),
                                 target_modules=lora["target_modules"], task_type="CAUSAL_LM")
    model.train()
    config_class = trl_config_class(method)
    if os.environ.get("WORLD_SIZE", "1") != "1" and not torch.cuda.is_available():
        trl_values.setdefault("ddp_backend", "gloo")
    if run.get("env"):
        trl_values.setdefault("max_tool_calling_iterations", 4)
    args = config_class(output_dir=str(run_dir / "checkpoints"), **trl_values)
    dataset = Dataset.from_list(rows)
    callback = _RunCallback(run_dir, progress)
    common = dict(model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[callback])
    if peft_config is not None:
        common["peft_config"] = peft_config
    if method == "sft":
        from trl import SFTTrainer
        trainer = SFTTrainer(**common)
    elif method == "dpo":
        from trl import DPOTrainer
        trainer = DPOTrainer(**common)
    elif method == "kto":
        from trl import KTOTrainer
        trainer = KTOTrainer(**common)
    elif run.get("env"):
        from trl import GRPOTrainer
        from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

        from mint.train.envs import load_environment, recorded
        from mint.train.rewards import load_reward
        # ChatML that renders tool calls as <tool_call>{json}</tool_call> (the agent harness's form), with the
        # response parser TRL knows for it
        tokenizer.chat_template = qwen2_5_chat_template
        add_response_schema(tokenizer)
        factory = recorded(load_environment(run["env"]), run_dir / "rollouts.jsonl")
        extra = [load_reward(r) for r in settings.rewards]
        trainer = GRPOTrainer(reward_funcs=extra or None, environment_factory=factory, **common)
    else:
        from trl import GRPOTrainer

        from mint.train.rewards import reward_functions
        trainer = GRPOTrainer(reward_funcs=reward_functions(run["specialist"], settings.rewards), **common)
    callback.trainer = trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    for noisy in (PrinterCallback, ProgressCallback):   # mint reports progress itself; stdout stays clean
        trainer.remove_callback(noisy)
    last = _last_checkpoint(run_dir) if resume else None
    if resume and last is None:
        raise BadInput(f"run {run_dir.name} has no checkpoint yet; start it again instead", field="--resume")
    output = trainer.train(resume_from_checkpoint=str(last) if last else None)
    final = {k: v for k, v in (trainer.state.log_history[-1] if trainer.state.log_history else {}).items()
             if isinstance(v, (int, float))}
    logged = [h for h in trainer.state.log_history if "loss" in h or "reward" in h]
    result = {"steps": trainer.state.global_step, "train_loss": output.training_loss,
              "last": {k: v for k, v in (logged[-1] if logged else {}).items() if isinstance(v, (int, float))},
              "summary": final, "resumed_from_step": int(last.name.split("-")[-1]) if last else None,
              "adapter_sha256": _adapter_digest(trainer.model), "base_fingerprint": loaded.fingerprint,
              "registered": False}
    rank = int(os.environ.get("RANK", "0"))
    atomic_write_json(run_dir / f"rank{rank}.json", {"adapter_sha256": result["adapter_sha256"],
                                                      "steps": result["steps"]})
    if trainer.is_world_process_zero():
        trainer.model.save_pretrained(str(run_dir / "adapter"), safe_serialization=True)
        atomic_write_json(run_dir / RESULT_FILE, result)
    return result


def _last_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = [p for p in (run_dir / "checkpoints").glob("checkpoint-*")
                   if re.fullmatch(r"checkpoint-\d+", p.name) and (p / "trainer_state.json").is_file()]
    return max(checkpoints, key=lambda p: int(p.name.split("-")[1]), default=None)


try:
    from transformers import TrainerCallback as _Base
except ImportError:  # pragma: no cover
    _Base = object


class _RunCallback(_Base):
    """metrics.jsonl, the progress bar, and the fault points the crash tests use."""

    def __init__(self, run_dir: Path, progress: TrainProgress | None) -> None:
        self.run_dir, self.progress, self.trainer = run_dir, progress, None
        self.last_time, self.last_tokens = None, None

    def _write(self, state, record: dict) -> None:
        if state.is_world_process_zero:
            with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def on_train_begin(self, args, state, control, **kwargs):
        model = kwargs.get("model")
        self.last_time = time.perf_counter()
        self._write(state, {"event": "start", "step": state.global_step, "max_steps": state.max_steps,
                            "adapter_sha256": _adapter_digest(model) if model is not None else None,
                            "time": time.time()})

    def on_step_end(self, args, state, control, **kwargs):
        fault_point(f"train.step_{state.global_step}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        now = time.perf_counter()
        record = {"step": state.global_step, "time": time.time()}
        for key in ("loss", "reward", "learning_rate", "grad_norm", "rewards/chosen", "kl", "entropy"):
            if isinstance(logs.get(key), (int, float)):
                record[key.replace("/", "_")] = logs[key]
        tokens = logs.get("num_tokens") or logs.get("num_input_tokens_seen")
        if isinstance(tokens, (int, float)) and self.last_tokens is not None and now > self.last_time:
            record["tokens_per_s"] = (tokens - self.last_tokens) / (now - self.last_time)
        if isinstance(tokens, (int, float)):
            self.last_tokens, self.last_time = tokens, now
        if "train_runtime" not in logs:
            self._write(state, record)
        if self.progress and state.is_world_process_zero:
            self.progress(state.global_step, state.max_steps, record)


def _register(ws: Workspace, run_dir: Path, result: dict) -> TrainResult:
    from mint.registry.artifacts import register

    run = json.loads((run_dir / RUN_FILE).read_text())
    fingerprint = result.get("base_fingerprint")
    metrics = {"train_loss": result.get("train_loss"), "steps": result.get("steps"),
               **{f"last_{k}": v for k, v in result.get("last", {}).items() if k in ("loss", "reward")}}
    revision = register(ws, run_dir / "adapter", specialist=run["specialist"], parent=run["parent"],
                        base=run["base"], base_fingerprint=fingerprint, dataset=run["dataset"], method=run["method"],
                        recipe=None, config_hash=run["config_hash"],
                        metrics={k: v for k, v in metrics.items() if v is not None})
    atomic_write_json(run_dir / RESULT_FILE, {**result, "registered": True, "revision": revision.ref,
                                               "revision_id": revision.id})
    return TrainResult(revision.ref, revision.id, run_dir.name, str(run_dir), run["method"], result["steps"],
                       run["examples"], metrics, result.get("resumed_from_step"))
