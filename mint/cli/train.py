"""mint train."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from mint.cli.common import JSON_OPT, app, err, out, print_json, quiet_transformers, ws


@app.command("train")
def train_command(
    specialist: Optional[str] = typer.Option(None, "--specialist", "-s"),
    data: Optional[str] = typer.Option(None, "--data", "-d", help="DATASET or DATASET@VERSION."),
    method: Optional[str] = typer.Option(None, "--method", "-m", help="sft | dpo | kto | grpo"),
    from_ref: Optional[str] = typer.Option(None, "--from", help="Start from this revision's adapter (e.g. coding:champion)."),
    base: Optional[str] = typer.Option(None, "--base", "-b", help="Base model (default: the parent's, else mint.yaml's)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML with lora:, trl:, rewards: blocks."),
    sets: list[str] = typer.Option([], "--set", help="KEY=VALUE, e.g. trl.max_steps=20 or lora.r=8 (repeatable)."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a killed run from its last checkpoint."),
    num_processes: int = typer.Option(1, "--num-processes", help="Processes (torchrun; gloo on CPU)."),
    accelerate_config: Optional[Path] = typer.Option(None, "--accelerate-config",
                                                     help="An accelerate config file (GPUs, FSDP, DeepSpeed)."),
    env: Optional[str] = typer.Option(None, "--env", help="GRPO in a tool environment: orders, or module:Class."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the settings a run would use, and why; train nothing."),
    json_out: bool = JSON_OPT,
) -> None:
    """Train a specialist's LoRA adapter from its episodes and register it as a candidate revision."""
    from mint.train.run import train

    if dry_run:
        from mint.train.config import planned_settings
        return print_json(planned_settings(method, config, sets))
    quiet_transformers()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn(), console=err, transient=True,
                   disable=json_out or not err.is_terminal)
    task = bar.add_task("train", total=None, status="")

    def progress(step: int, total: int, logged: dict) -> None:
        status = "  ".join(f"{k} {logged[k]:.4g}" for k in ("loss", "reward", "tokens_per_s") if k in logged)
        bar.update(task, completed=step, total=total, status=status)

    with bar:
        result = train(ws(), specialist=specialist, data=data, method=method, from_ref=from_ref, base=base,
                       config=config, sets=sets, resume=resume, num_processes=num_processes,
                       accelerate_config=accelerate_config, env=env, progress=progress)
    if json_out:
        return print_json(result)
    resumed = f", resumed from step {result.resumed_from_step}" if result.resumed_from_step else ""
    loss = result.metrics.get("train_loss")
    out.print(f"[bold]{result.ref}[/] ({result.revision_id[:12]}): {result.method} on {result.examples} examples, "
              f"{result.steps} steps{resumed}, train loss {loss:.4g}" if loss is not None else f"[bold]{result.ref}[/]")
    out.print(f"run: {escape(result.run_dir)}")
