"""Training one prepared run in this process (or as one rank of several): load the base, build the
method's TRL trainer, train, save. ``mint.train.run`` prepares the run directory this reads."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
import transformers
import trl
from datasets import Dataset
from datasets.utils.logging import disable_progress_bar
from peft import LoraConfig, PeftModel
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

from mint.base import load_base
from mint.errors import BadInput, Refused
from mint.faults import checkpoint as fault_point
from mint.hardware import ROW_ATTENTION, Choice, training_attention
from mint.jsonl import read_jsonl
from mint.train import padding_free
from mint.train.config import TrainSettings, trl_config_class
from mint.tracking import REPORT_TO_ENV
from mint.train.health import run_warnings
from mint.train.rundir import EXAMPLES_FILE, METRICS_FILE, RESULT_FILE, RUN_FILE, TEMPLATE_FILE, TrainProgress, phase
from mint.workspace import atomic_write_json


def run_training(run_dir: Path, *, progress: TrainProgress | None = None, resume: bool = False) -> dict:
    """Train the run in this process (one rank of several under torchrun); returns the result record."""
    run = json.loads((run_dir / RUN_FILE).read_text())
    rows = [row for _number, row in read_jsonl(run_dir / EXAMPLES_FILE)]
    last = _last_checkpoint(run_dir) if resume else None
    if resume and last is None:
        raise BadInput(f"run {run_dir.name} has no checkpoint yet; start it again instead", field="--resume")
    phase(progress, f"loading base {run['base']}")
    loaded = load_run_base(run_dir, run)
    recorded = (run.get("effective") or {}).get("base_fingerprint")
    if recorded and recorded != loaded.fingerprint:
        raise Refused(f"base {run['base']} changed since run {run_dir.name} started ({recorded[:19]}... now "
                      f"{loaded.fingerprint[:19]}...); start a new run")
    phase(progress, "building the trainer")
    trainer = build_trainer(run_dir, run, loaded.model, loaded.tokenizer, rows, progress)
    _record_backend(run_dir, run, trainer, loaded.fingerprint, attention_choice(run, loaded.model))
    output = execute(trainer, last)
    return save_result(run_dir, trainer, output, loaded.fingerprint, last)


def load_run_base(run_dir: Path, run: dict):
    """The base with the run's chat template and the attention kernel its rows train fastest with
    (mint.hardware.training_attention), and the --from parent's adapter on it (trainable)."""
    loaded = load_base(run["base"])
    attention = _wanted_attention(run, loaded.model)
    if attention.value == ROW_ATTENTION:
        padding_free.register()
    if attention.value is not None and attention.value != loaded.model.config._attn_implementation:
        loaded.model.set_attn_implementation(attention.value)
    if (run_dir / TEMPLATE_FILE).is_file():
        loaded.tokenizer.chat_template = (run_dir / TEMPLATE_FILE).read_text(encoding="utf-8")
    if run["method"] == "grpo":
        loaded.tokenizer.padding_side = "left"
    if run["parent"]:
        from mint.registry import store
        from mint.registry.artifacts import revision_dir
        from mint.workspace import workspace

        ws = workspace(run_dir.parent.parent)
        conn = store.open_store(ws, create=False)
        try:
            parent = store.get_revision(conn, run["parent"])
        finally:
            conn.close()
        loaded.model = PeftModel.from_pretrained(loaded.model, str(revision_dir(ws, parent)), is_trainable=True)
    loaded.model.train()
    return loaded


def _wanted_attention(run: dict, model):
    trl_settings = run["settings"]["trl"]
    choice = training_attention(model.device.type, run["method"], trl_settings.get("max_length"),
                                padding_free=bool(trl_settings.get("padding_free")))
    if choice.value == ROW_ATTENTION and not padding_free.rows_apart(model):
        return Choice(None, "the model's own: its attention is not plain causal (a sliding window or capped "
                            "scores), so its batches are padded")
    return choice


def attention_choice(run: dict, model):
    """The attention kernel the run trains ``model`` with (as ``load_run_base`` set it), and why."""
    return replace(_wanted_attention(run, model), value=model.config._attn_implementation)


def training_arguments(method: str, trl_values: dict, output_dir: Path, *, env: str | None = None):
    """The TRL config object for the method: the run's settings plus what mint decides for this process."""
    values = dict(trl_values)
    # where the run is tracked (mint.tracking sets it for every process of the run); mint.yaml's tracking,
    # not the run's settings: the adapter is the same either way
    reported = [name for name in os.environ.get(REPORT_TO_ENV, "").split(",") if name]
    if reported:
        values["report_to"] = reported
    if os.environ.get("WORLD_SIZE", "1") != "1" and not torch.cuda.is_available():
        values.setdefault("ddp_backend", "gloo")
    if env:
        values.setdefault("max_tool_calling_iterations", 4)
    return trl_config_class(method)(output_dir=str(output_dir), **values)


def lora_targets(model, target_modules, from_layer) -> dict:
    """LoraConfig's ``target_modules`` and ``layers_to_transform`` for an adapter that changes the decoder
    layers from ``from_layer`` on (0: all of them; ``router``: the router probe's layer)."""
    from torch import nn

    from mint.base import decoder_layers, probe_layers
    from mint.train.config import ROUTER_LAYER

    count = len(decoder_layers(model))
    first = probe_layers(model)[-1] if from_layer == ROUTER_LAYER else from_layer
    if not first:
        return {"target_modules": target_modules}
    if first >= count:
        raise BadInput(f"the base has {count} decoder layers: from_layer {first} leaves none to adapt",
                       field="lora.from_layer")
    layers = list(range(first, count))
    if isinstance(target_modules, list):
        return {"target_modules": target_modules, "layers_to_transform": layers}
    # PEFT takes layers_to_transform with a list of names only: a pattern becomes the names it matches
    linear = [name for name, module in model.named_modules()
              if isinstance(module, nn.Linear) and ".layers." in f".{name}"]
    if target_modules == "all-linear":
        return {"target_modules": sorted({name.rpartition(".")[2] for name in linear}), "layers_to_transform": layers}
    index = re.compile(r"(?:^|\.)layers\.(\d+)\.")
    chosen = [name for name in linear if re.fullmatch(target_modules, name)
              and (found := index.search(name)) and int(found[1]) >= first]
    if not chosen:
        raise BadInput(f"{target_modules!r} matches no linear layer from decoder layer {first} on",
                       field="lora.target_modules")
    return {"target_modules": chosen}


def build_trainer(run_dir: Path, run: dict, model, tokenizer, rows: list[dict],
                  progress: TrainProgress | None = None):
    """The method's TRL trainer over the run's rows, with mint's callback and without TRL's printers."""
    disable_progress_bar()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")   # environment_factory is experimental in TRL 1.x
    settings = TrainSettings(**{**run["settings"], "rewards": tuple(run["settings"]["rewards"])})
    method = run["method"]
    if method == "sft" and settings.trl.get("padding_free") and not padding_free.kept_apart(model):
        # joined rows would attend to each other: pad them instead (same examples, same batches)
        settings = replace(settings, trl={**settings.trl, "padding_free": False})
    args = training_arguments(method, settings.trl, run_dir / "checkpoints", env=run.get("env"))
    callback = RunCallback(run_dir, progress)
    common = dict(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                  callbacks=[callback])
    if not run["parent"]:
        lora = settings.lora
        common["peft_config"] = LoraConfig(r=int(lora["r"]), lora_alpha=lora["alpha"],
                                           lora_dropout=float(lora["dropout"]),
                                           task_type="CAUSAL_LM",
                                           **lora_targets(model, lora["target_modules"], lora.get("from_layer", 0)))
    if method == "sft":
        from trl import SFTTrainer

        from mint.train.lm_head import score_trained_positions, scores_every_position
        trainer = SFTTrainer(**common)
        # where TRL's head would project every position through the vocabulary (a CPU), only the trained ones
        trainer.mint_lm_head = "TRL's fused head"
        if scores_every_position(trainer.args.device) and score_trained_positions(trainer.model.get_base_model()):
            trainer.mint_lm_head = "trained positions only (mint.train.lm_head)"
    elif method == "dpo":
        from trl import DPOTrainer
        trainer = DPOTrainer(**common)
    elif method == "kto":
        from trl import KTOTrainer
        trainer = KTOTrainer(**common)
    elif run.get("env"):
        from trl import GRPOTrainer

        from mint.train.envs import load_environment, recorded
        from mint.train.rewards import load_reward
        _add_tool_response_parser(tokenizer)
        factory = recorded(load_environment(run["env"]), run_dir / "rollouts.jsonl", run["specialist"])
        extra = [load_reward(r) for r in settings.rewards]
        trainer = GRPOTrainer(reward_funcs=extra or None, environment_factory=factory, **common)
    else:
        from trl import GRPOTrainer

        from mint.train.rewards import reward_functions
        trainer = GRPOTrainer(reward_funcs=reward_functions(run["specialist"], settings.rewards, run.get("harness")),
                              **common)
    trainer.mint_frozen_weights = frozen_weights_at_compute_precision(trainer) if method == "sft" else None
    for noisy in (PrinterCallback, ProgressCallback):   # mint reports progress itself; stdout stays clean
        trainer.remove_callback(noisy)
    return trainer


def frozen_weights_at_compute_precision(trainer) -> str | None:
    """On a CPU under bf16 autocast, the decoder layers' frozen linear weights stored in bf16, once, and PEFT's
    LoRA layers left to take their bf16 inputs as they come; what it did, or None. Autocast casts a weight that
    needs no gradient again at every forward (its cache keeps trainable ones only): about 107M values a step for
    SmolLM2. And PEFT casts a LoRA's input to its A's dtype (fp32) before autocast casts it back to bf16: for the
    layers whose input is bf16 (attention's output, the MLP's product) two copies each way, on the same values.
    Every product rounds the same values to bf16 either way, and a bf16 gradient comes back through the two casts
    unchanged, so a run trains the same, loss for loss; only SFT, whose every forward runs under autocast (its head
    is mint.train.lm_head's, which casts its own weight once)."""
    from peft.tuners.lora import LoraLayer
    from torch import nn

    from mint.base import decoder_layers

    args = trainer.args
    if not args.bf16 or args.device.type != "cpu":
        return None
    model = trainer.model.get_base_model() if isinstance(trainer.model, PeftModel) else trainer.model
    cast = 0
    for layer in decoder_layers(model):
        for module in layer.modules():
            if isinstance(module, LoraLayer):
                module.cast_input_dtype_enabled = False
            if type(module) is nn.Linear and not module.weight.requires_grad and module.weight.dtype == torch.float32:
                module.weight.data = module.weight.data.to(torch.bfloat16)
                if module.bias is not None and not module.bias.requires_grad:
                    module.bias.data = module.bias.data.to(torch.bfloat16)
                cast += 1
    return f"bf16, cast once ({cast} linear layers' frozen weights; LoRA inputs uncast)" if cast else None


def _add_tool_response_parser(tokenizer) -> None:
    """TRL's parser for ``<tool_call>{json}</tool_call>`` answers, which it assigns to its qwen2.5 template:
    mint's template writes calls the same way, so the parser is chosen under TRL's template and ours put back."""
    ours = tokenizer.chat_template
    tokenizer.chat_template = qwen2_5_chat_template
    try:
        add_response_schema(tokenizer)
    finally:
        tokenizer.chat_template = ours


def _record_backend(run_dir: Path, run: dict, trainer, fingerprint: str, attention=None) -> None:
    """run.json's ``effective`` gains what only the running process knows: device, precision, processes."""
    if not trainer.is_world_process_zero():
        return
    args = trainer.args
    effective = dict(run.get("effective") or {})
    effective.update(base_fingerprint=effective.get("base_fingerprint") or fingerprint, backend={
        "device": str(args.device), "world_size": args.world_size, "ddp_backend": args.ddp_backend,
        "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
        "gradient_checkpointing": bool(args.gradient_checkpointing),
        "assistant_only_loss": bool(getattr(args, "assistant_only_loss", False)),
        **({"padding_free": bool(args.padding_free)} if hasattr(args, "padding_free") else {}),
        **({"lm_head": trainer.mint_lm_head} if hasattr(trainer, "mint_lm_head") else {}),
        **({"frozen_weights": trainer.mint_frozen_weights} if getattr(trainer, "mint_frozen_weights", None) else {}),
        **({"attention": {"value": attention.value, "reason": attention.reason}} if attention else {}),
        "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__})
    atomic_write_json(run_dir / RUN_FILE, {**run, "effective": effective})


def execute(trainer, checkpoint: Path | None):
    """Train from scratch or from ``checkpoint`` (the callback checks its adapter against the hash recorded
    when it was saved)."""
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, RunCallback))
    callback.resuming_from = int(checkpoint.name.split("-")[-1]) if checkpoint else None
    return trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)


def save_result(run_dir: Path, trainer, output, fingerprint: str, last: Path | None) -> dict:
    """result.json and the adapter (rank 0), and each rank's own record (its world size and final hash)."""
    logged = [h for h in trainer.state.log_history if "loss" in h or "reward" in h]
    final = {k: v for k, v in (trainer.state.log_history[-1] if trainer.state.log_history else {}).items()
             if isinstance(v, (int, float))}
    result = {"steps": trainer.state.global_step, "train_loss": output.training_loss,
              "last": {k: v for k, v in (logged[-1] if logged else {}).items() if isinstance(v, (int, float))},
              "summary": final, "resumed_from_step": int(last.name.split("-")[-1]) if last else None,
              "adapter_sha256": adapter_digest(trainer.model), "base_fingerprint": fingerprint,
              "warnings": run_warnings(_read_metrics(run_dir)), "registered": False}
    rank = int(os.environ.get("RANK", "0"))
    # the world size the process group really has: 1 here means the ranks trained alone, unsynchronised
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    atomic_write_json(run_dir / f"rank{rank}.json", {"adapter_sha256": result["adapter_sha256"],
                                                      "steps": result["steps"], "world_size": world})
    if trainer.is_world_process_zero():
        trainer.model.save_pretrained(str(run_dir / "adapter"), safe_serialization=True)
        atomic_write_json(run_dir / RESULT_FILE, result)
    return result


def _read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / METRICS_FILE
    # a killed run may have cut its last line
    return [row for _number, row in read_jsonl(path, torn="skip")] if path.is_file() else []


def adapter_digest(model) -> str:
    """sha256 of every LoRA tensor (name and float32 bytes), in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted((n, p) for n, p in model.named_parameters() if "lora_" in n):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _last_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = [p for p in (run_dir / "checkpoints").glob("checkpoint-*")
                   if re.fullmatch(r"checkpoint-\d+", p.name) and (p / "trainer_state.json").is_file()]
    return max(checkpoints, key=lambda p: int(p.name.split("-")[1]), default=None)


class RunCallback(TrainerCallback):
    """metrics.jsonl, progress, warnings for a run that looks broken, checkpoint hashes, and the fault
    points the crash tests use."""

    def __init__(self, run_dir: Path, progress: TrainProgress | None) -> None:
        self.run_dir, self.progress = run_dir, progress
        self.last_time, self.last_tokens = None, None
        self.resuming_from: int | None = None
        self.records: list[dict] = []
        self.warned: set[str] = set()

    def _write(self, state, record: dict) -> None:
        if state.is_world_process_zero:
            with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def on_train_begin(self, args, state, control, **kwargs):
        model = kwargs.get("model")
        digest = adapter_digest(model) if model is not None else None
        if self.resuming_from is not None:
            saved = next((r.get("adapter_sha256") for r in _read_metrics(self.run_dir)
                          if r.get("event") == "checkpoint" and r.get("step") == self.resuming_from), None)
            if saved is not None and saved != digest:
                raise Refused(f"checkpoint-{self.resuming_from} of run {self.run_dir.name} holds another adapter "
                              f"than the one saved at step {self.resuming_from} (sha256 {saved[:12]}, now "
                              f"{(digest or '')[:12]}): it was changed or corrupted; start a new run")
        self.last_time = time.perf_counter()
        self._write(state, {"event": "start", "step": state.global_step, "max_steps": state.max_steps,
                            "adapter_sha256": digest, "time": time.time()})
        if self.progress and state.is_world_process_zero:
            self.progress(state.global_step, state.max_steps, {"phase": "training"})

    def on_step_end(self, args, state, control, **kwargs):
        fault_point(f"train.step_{state.global_step}")

    def on_save(self, args, state, control, **kwargs):
        model = kwargs.get("model")
        if model is not None:
            self._write(state, {"event": "checkpoint", "step": state.global_step,
                                "adapter_sha256": adapter_digest(model), "time": time.time()})

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "train_runtime" in logs:
            return
        now = time.perf_counter()
        record = {"step": state.global_step, "time": time.time()}
        for key in ("loss", "reward", "learning_rate", "grad_norm", "rewards/chosen", "kl", "entropy"):
            value = logs.get(key)
            if isinstance(value, (int, float)):
                record[key.replace("/", "_")] = value if math.isfinite(value) else str(value)
        tokens = logs.get("num_tokens") or logs.get("num_input_tokens_seen")
        if isinstance(tokens, (int, float)) and self.last_tokens is not None and now > self.last_time:
            record["tokens_per_s"] = (tokens - self.last_tokens) / (now - self.last_time)
        if isinstance(tokens, (int, float)):
            self.last_tokens, self.last_time = tokens, now
        self._write(state, record)
        self.records.append(record)
        fresh = [w for w in run_warnings(self.records) if w not in self.warned]
        self.warned.update(fresh)
        if self.progress and state.is_world_process_zero:
            self.progress(state.global_step, state.max_steps, {**record, **({"warnings": fresh} if fresh else {})})


