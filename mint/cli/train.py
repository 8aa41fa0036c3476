"""mint train."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from mint.cli.common import (
    DEVICE_OPT,
    JSON_OPT,
    app,
    choose_device,
    counted,
    err,
    out,
    print_json,
    quiet_transformers,
    say_device,
    ws,
)


@app.command("train")
def train_command(
    specialist: Optional[str] = typer.Option(None, "--specialist", "-s",
                                             help="The specialist to train (a name in mint.yaml, e.g. coding)."),
    data: Optional[str] = typer.Option(None, "--data", "-d", help="DATASET or DATASET@VERSION."),
    method: Optional[str] = typer.Option(None, "--method", "-m", help="sft | dpo | kto | grpo"),
    from_ref: Optional[str] = typer.Option(None, "--from", help="Start from this revision's adapter (e.g. coding:champion)."),
    base: Optional[str] = typer.Option(None, "--base", "-b", help="Base model (default: the parent's, else mint.yaml's)."),
    config: Optional[Path] = typer.Option(None, "--train-config",
                                          help="Training settings: YAML with lora:, trl:, rewards: blocks."),
    sets: list[str] = typer.Option([], "--set", help="KEY=VALUE, e.g. trl.max_steps=20 or lora.r=8 (repeatable)."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a killed run from its last checkpoint, "
                                                                "with the settings it recorded."),
    num_processes: int = typer.Option(1, "--num-processes", help="Processes (torchrun; gloo on CPU)."),
    accelerate_config: Optional[Path] = typer.Option(None, "--accelerate-config",
                                                     help="An accelerate config file (GPUs, FSDP, DeepSpeed)."),
    env: Optional[str] = typer.Option(None, "--env", help="GRPO in a tool environment: orders, or module:Class."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the settings a run would use, and why; train nothing."),
    device: str = DEVICE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Train a specialist's LoRA adapter from its episodes and register it as a candidate revision.

    \b
    Example:
      mint train --specialist coding --data prod --method sft --set max_steps=20
    """
    from mint.project import load_project
    from mint.train.kinds import preview_training, train_specialist

    choose_device(device, "train", json_out, say=False)    # said once the request's checks have passed
    project = load_project()
    if dry_run:
        from dataclasses import asdict, is_dataclass

        preview = preview_training(ws(writes=True), project, specialist, data=data, method=method, from_ref=from_ref, base=base,
                                   config=config, sets=sets, resume=resume, num_processes=num_processes,
                                   accelerate_config=accelerate_config, env=env)
        say_device("train", json_out)
        settings, examples = preview.settings, preview.examples
        plain = asdict(settings) if is_dataclass(settings) and not isinstance(settings, type) else settings
        if json_out:
            return print_json({**plain, **({"examples": asdict(examples)} if examples else {})})
        _render_settings(plain)
        if examples is not None:
            table = Table(title=f"{examples.method} examples from {escape(examples.dataset)} ({examples.specialist})")
            table.add_column("")
            table.add_column("episodes", justify="right")
            table.add_row(f"[bold]examples[/] (at least {examples.needed} needed)", f"{examples.examples:,}")
            for why, n in sorted(examples.left_out.items(), key=lambda kv: -kv[1]):
                table.add_row(f"left out: {escape(why)}", f"{n:,}")
            out.print(table)
        out.print("(--json prints the whole plan, with the hardware probe's figures)")
        return
    display = TrainDisplay(live=err.is_terminal and not json_out)
    started: list[bool] = []

    def progress(step: int, total: int, logs: dict) -> None:
        if not started:            # the run's first word comes after its checks: then where it trains
            started.append(True)
            say_device("train", json_out)
        display.update(step, total, logs)

    with display.bar:
        result = train_specialist(ws(writes=True), project, specialist, data=data, method=method, from_ref=from_ref, base=base,
                                  config=config, sets=sets, resume=resume, num_processes=num_processes,
                                  accelerate_config=accelerate_config, env=env, progress=progress)
    if json_out:
        return print_json(result)
    for warning in result.warnings:
        if warning not in display.warned:
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    resumed = f", resumed from step {result.resumed_from_step}" if result.resumed_from_step else ""
    loss = result.metrics.get("train_loss")
    out.print(f"[bold]{result.ref}[/] ({result.revision_id[:12]}): {result.method} on "
              f"{counted(result.examples, 'example')}, {counted(result.steps, 'step')}{resumed}, train loss {loss:.4g}"
              if loss is not None else f"[bold]{result.ref}[/]")
    out.print(f"run: {escape(result.run_dir)}")


def _render_settings(plan: dict) -> None:
    """What a run would use, as tables: each setting with its value, and the hardware-aware choices with why."""
    def shown(value) -> str:
        return escape(", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value))

    table = Table(title=f"{plan.get('method', '')} settings".strip())
    for column in ("setting", "value"):
        table.add_column(column)
    for block in ("lora", "trl"):
        for key, value in (plan.get(block) or {}).items():
            table.add_row(f"{block}.{key}", shown(value))
    if plan.get("rewards"):
        table.add_row("rewards", shown(plan["rewards"]))
    why = plan.get("why") if isinstance(plan.get("why"), dict) else {}
    if why:
        table.add_column("why")
    for key, value in plan.items():   # what a kind of its own plans (the router's probe), flat
        if key not in ("method", "lora", "trl", "rewards", "hardware") and not isinstance(value, dict):
            table.add_row(key, shown(value), *([shown(why.get(key, ""))] if why else []))
    out.print(table)
    hardware = plan.get("hardware") or {}
    choices = {**(hardware.get("choices") or {}),
               **({"torch_threads": hardware["torch_threads"]} if "torch_threads" in hardware else {})}
    if choices:
        why = Table(title="chosen for this machine")
        for column in ("setting", "value", "why"):
            why.add_column(column)
        for key, choice in choices.items():
            if isinstance(choice, dict):
                value = shown(choice.get("value"))
                if "turned_by_user_settings" in choice:   # another of the user's settings turned it
                    value += f" (your settings: {shown(choice['turned_by_user_settings'])})"
                why.add_row(key, value, escape(str(choice.get("reason", ""))))
        out.print(why)


class TrainDisplay:
    """A progress bar with ETA on a terminal; one plain line per logged step when stderr is a pipe (cron,
    CI); warnings as they appear, either way."""

    def __init__(self, live: bool) -> None:
        self.warned: set[str]
        self.live, self.warned = live, set()
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[steps]}"),
                            TextColumn("{task.fields[status]}"), TimeRemainingColumn(), console=err,
                            transient=True, disable=not live)
        self.task = self.bar.add_task("starting", total=None, steps="", status="")
        self.started: tuple[float, int] | None = None   # (time, step) when training began
        self.quiet = False

    def update(self, step: int, total: int, logged: dict) -> None:
        if not self.quiet:   # only now: importing transformers before the request is checked costs seconds
            quiet_transformers()
            self.quiet = True
        if "phase" in logged:
            if logged["phase"] == "training":
                self.started = (time.monotonic(), step)
            self.bar.update(self.task, description=logged["phase"], total=total or None, completed=step,
                            steps=f"step {step}/{total}" if total else "")
            if not self.live:
                err.print(escape(logged["phase"]) + "...", highlight=False)
            return
        status = "  ".join(f"{k.replace('_per_s', '/s')} {logged[k]:.4g}" for k in ("loss", "reward", "tokens_per_s")
                           if isinstance(logged.get(k), (int, float)))
        self.bar.update(self.task, description="train", completed=step, total=total or None,
                        steps=f"step {step}/{total}", status=status)
        if not self.live:
            eta = self.eta(step, total)
            err.print(f"step {step}/{total}  {status}" + (f"  ETA {eta}" if eta else ""), highlight=False)
        for warning in logged.get("warnings", []):
            self.warned.add(warning)
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)

    def eta(self, step: int, total: int) -> str | None:
        if self.started is None or not total or step <= self.started[1]:
            return None
        elapsed = time.monotonic() - self.started[0]
        seconds = int(elapsed / (step - self.started[1]) * (total - step))
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
