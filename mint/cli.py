"""The ``mint`` command line: parse, call one library function, render.

Every command takes ``--json`` for one machine-readable object instead of
tables. Exit codes: 0 success, 1 refused (a gate failed), 2 bad input, 3 a bug.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from pathlib import Path
from typing import Any, Optional

import click
import typer

try:   # newer typer vendors its own copy of click, with its own exception classes
    from typer._click.exceptions import ClickException as _TyperClickException
except ImportError:  # pragma: no cover
    _TyperClickException = click.ClickException
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from mint import __version__
from mint.errors import MintError

EXAMPLES = """
Examples:

\b
  mint init                                   # mint.yaml, contracts/, recipes/
  mint ingest logs/ --dataset prod            # logs -> a versioned dataset
  mint data show prod --head 3                # what was kept, by specialist
  mint data export prod --format openai out.jsonl
  mint base show smollm2-135m                 # the embedded default base
  mint chat "What is the capital of France?"  # one turn on the base
  mint train --specialist coding --data prod --method sft --set max_steps=20
  mint contract check contracts/coding.yaml   # validate without running
  mint eval coding:v2 --contract contracts/coding.yaml
  mint registry import ./my-lora --specialist coding
  mint promote coding:v2 --report report.json # only if it beat the current champion
  mint rollback coding                        # back to the previous champion
"""

app = typer.Typer(help="mint: keep a deployed Mixture-of-LoRA model learning.\n" + EXAMPLES,
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})
data_app = typer.Typer(help="Dataset versions made by `mint ingest`.", no_args_is_help=True)
base_app = typer.Typer(help="Base models: the embedded default, tiny-random, local directories.",
                       no_args_is_help=True)
registry_app = typer.Typer(help="Adapter revisions, aliases and the event log.", no_args_is_help=True)
contract_app = typer.Typer(help="HCP contracts: harness, suites and gates.", no_args_is_help=True)
genui_app = typer.Typer(help="UI4A component trees.", no_args_is_help=True)
app.add_typer(contract_app, name="contract")
app.add_typer(genui_app, name="genui")
app.add_typer(data_app, name="data")
app.add_typer(base_app, name="base")
app.add_typer(registry_app, name="registry")

out = Console()
err = Console(stderr=True)
JSON_OPT = typer.Option(False, "--json", help="Print one JSON object instead of tables.")
_state: dict[str, Any] = {"home": None}


def _ws():
    from mint.workspace import workspace
    return workspace(_state["home"])


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(_plain(value), ensure_ascii=False, indent=2) + "\n")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mint {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    home: Optional[Path] = typer.Option(None, "--home", envvar="MINT_HOME",
                                        help="Workspace folder (default ./.mint)."),
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    _state["home"] = home


# --- init ------------------------------------------------------------------------

@app.command()
def init(directory: Path = typer.Option(Path("."), "--dir", help="Project folder."),
         json_out: bool = JSON_OPT) -> None:
    """Write mint.yaml (the four specialists and their routing keywords), contracts/ and recipes/; never overwrite."""
    from mint.project import init_project

    result = init_project(directory)
    if json_out:
        return _print_json(result)
    for name in result.created:
        out.print(f"[green]created[/] {Path(result.directory) / name}")
    for name in result.kept:
        out.print(f"[yellow]kept[/]    {Path(result.directory) / name} (exists)")


# --- ingest ------------------------------------------------------------------------

@app.command()
def ingest(
    paths: list[Path] = typer.Argument(..., help="Log files or folders (JSONL, JSON, .gz, Parquet, saved HF datasets)."),
    dataset: str = typer.Option("default", "--dataset", "-d", help="Dataset to add a version to."),
    fmt: str = typer.Option("auto", "--format", "-f", help="auto | openai | sharegpt | mint | hf"),
    config: Optional[Path] = typer.Option(None, "--config", help="Project file (default ./mint.yaml)."),
    no_scrub: bool = typer.Option(False, "--no-scrub", help="Keep PII and secrets as they are."),
    max_record_bytes: int = typer.Option(1_000_000, "--max-record-bytes", help="Larger records are quarantined."),
    json_out: bool = JSON_OPT,
) -> None:
    """Turn interaction logs into a new immutable version of a dataset (scrubbed, deduplicated, labeled)."""
    from mint.data.ingest import ingest as run_ingest
    from mint.project import load_project

    project = load_project(config)
    with _ByteProgress(enabled=not json_out) as progress:
        result = run_ingest(_ws(), paths, dataset=dataset, fmt=fmt, project=project, scrub=not no_scrub,
                            max_record_bytes=max_record_bytes, progress=progress.advance)
    if json_out:
        return _print_json(result)
    table = Table(title=f"ingest → {result.dataset}")
    for column in ("source", "read", "kept", "duplicate", "quarantined", "scrubbed"):
        table.add_column(column, justify="left" if column == "source" else "right",
                         overflow="fold" if column == "source" else "ellipsis")
    for s in result.sources:
        table.add_row(escape(s.path), f"{s.read:,}", f"{s.kept:,}", f"{s.duplicate:,}",
                      f"[red]{s.quarantined:,}[/]" if s.quarantined else "0", f"{s.scrubbed:,}")
    out.print(table)
    if result.by_specialist:
        out.print("new episodes by specialist: " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(result.by_specialist.items(), key=lambda kv: -kv[1])))
    if result.scrubbed:
        out.print("scrubbed: " + ", ".join(f"{k} {v:,}" for k, v in sorted(result.scrubbed.items())))
    if result.reasons:
        out.print("quarantined: " + "; ".join(f"{escape(k)} ×{v}" for k, v in sorted(result.reasons.items()))
                  + f"  → {escape(result.quarantine_file)}")
    if result.created:
        out.print(f"[green]version {result.version}[/] of {result.dataset}: +{result.episodes_added:,} episodes, "
                  f"{result.total_episodes:,} in all ({result.seconds:.1f}s)")
    else:
        out.print(f"nothing new: {result.dataset} stays at version {result.version or '(empty)'}")


class _ByteProgress:
    """A rich progress bar per source, shown only for sources big enough to take a while."""

    MIN_BYTES = 8 << 20

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and err.is_terminal
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TimeRemainingColumn(), console=err, transient=True)
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> "_ByteProgress":
        if self.enabled:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.progress.stop()

    def advance(self, label: str, n: int, total: int) -> None:
        if not self.enabled or total < self.MIN_BYTES:
            return
        task = self.tasks.get(label)
        if task is None:
            task = self.tasks[label] = self.progress.add_task(label, total=total)
        self.progress.advance(task, n)


# --- data ------------------------------------------------------------------------------

@data_app.command("ls")
def data_ls(json_out: bool = JSON_OPT) -> None:
    """List datasets with their current version and episode counts."""
    from mint.data.datasets import list_datasets

    rows = list_datasets(_ws())
    if json_out:
        return _print_json({"datasets": rows})
    if not rows:
        out.print("no datasets yet: `mint ingest PATH --dataset NAME` makes one")
        return
    table = Table()
    for column in ("dataset", "version", "#", "episodes", "by specialist", "quarantined", "created"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.name, r.version, f"v{r.number}", f"{r.episodes:,}",
                      ", ".join(f"{k} {v}" for k, v in sorted(r.by_specialist.items())),
                      str(r.quarantined), r.created_at)
    out.print(table)


@data_app.command("show")
def data_show(name: str, version: Optional[str] = typer.Option(None, "--version", "-v",
                                                               help="Hash prefix or vN (default: latest)."),
              head: int = typer.Option(5, "--head", "-n", help="How many episodes to print."),
              json_out: bool = JSON_OPT) -> None:
    """Show a dataset version's manifest, its history and its first episodes."""
    from mint.data.datasets import show_dataset

    view = show_dataset(_ws(), name, version, head)
    if json_out:
        return _print_json(view)
    m = view.manifest
    out.print(f"[bold]{view.name}[/] version {m['version']} (v{m['number']}, parent {m['parent'] or '-'}) "
              f"created {m['created_at']}")
    out.print(f"episodes: {m['total_episodes']:,} ({m['episodes']:,} new in this version); by specialist: "
              + ", ".join(f"{k} {v}" for k, v in sorted(m["by_specialist"].items())))
    if m.get("scrubbed"):
        out.print("scrubbed in this version: " + ", ".join(f"{k} {v}" for k, v in sorted(m["scrubbed"].items())))
    out.print(f"quarantined records: {view.quarantined} ({view.quarantine_file})")
    history = Table(title="versions")
    for column in ("#", "version", "parent", "new", "total", "created"):
        history.add_column(column)
    for v in view.versions:
        history.add_row(f"v{v['number']}", v["version"], v["parent"] or "-", str(v["episodes"]),
                        str(v["total_episodes"]), v["created_at"])
    out.print(history)
    for episode in view.head:
        out.print(f"[cyan]{episode['id'][:12]}[/] {episode['specialist']} {escape(episode['source'])} "
                  f"rating={episode['feedback']['rating']}")
        for message in episode["messages"]:
            text = message["content"] or json.dumps(message.get("tool_calls"), ensure_ascii=False)
            out.print(f"  [bold]{message['role']}:[/] {escape(text[:200])}", highlight=False)


@data_app.command("export")
def data_export(name: str, out_path: Path = typer.Argument(..., metavar="OUT"),
                fmt: str = typer.Option("openai", "--format", "-f", help="openai (JSONL file) | hf (save_to_disk folder)"),
                version: Optional[str] = typer.Option(None, "--version", "-v"),
                specialist: Optional[str] = typer.Option(None, "--specialist", "-s"),
                force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
                json_out: bool = JSON_OPT) -> None:
    """Write a dataset version for other tools: OpenAI chat JSONL or a Hugging Face dataset folder."""
    from mint.data.datasets import export_dataset

    result = export_dataset(_ws(), name, fmt, out_path, version, specialist, force)
    if json_out:
        return _print_json(result)
    out.print(f"exported {result.episodes:,} episodes of {result.dataset}@{result.version} as {result.format} "
              f"→ {result.out}")


# --- base ------------------------------------------------------------------------------

@base_app.command("ls")
def base_ls(json_out: bool = JSON_OPT) -> None:
    """List the built-in bases and whether they are ready."""
    from mint.base import list_bases

    rows = list_bases()
    if json_out:
        return _print_json({"bases": rows})
    table = Table()
    for column in ("base", "ready", "cached", "description", "path"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.name, "yes" if r.available else f"no: {r.fix}", "yes" if r.cached else "no",
                      r.description, r.path or "-")
    out.print(table)
    out.print("Any local Hugging Face model directory works too: --base ./path/to/model")


@base_app.command("show")
def base_show(name: str, json_out: bool = JSON_OPT) -> None:
    """Load a base and show its architecture, size and fingerprint (converts the embedded GGUF once)."""
    from mint.base import describe_base

    _quiet_transformers()
    info = describe_base(name)
    if json_out:
        return _print_json(info)
    table = Table(show_header=False)
    for key, value in info.items():
        table.add_row(key, f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value))
    out.print(table)


# --- chat --------------------------------------------------------------------------------

@app.command()
def chat(prompt: str = typer.Argument(..., help="The user's message."),
         base: Optional[str] = typer.Option(None, "--base", "-b", help="Base model (default: mint.yaml's, else smollm2-135m)."),
         system: Optional[str] = typer.Option(None, "--system", help="A system prompt."),
         max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
         config: Optional[Path] = typer.Option(None, "--config", help="Project file (default ./mint.yaml)."),
         json_out: bool = JSON_OPT) -> None:
    """Answer one user turn (greedy). Until specialists are promoted, the bare base answers."""
    from mint.mol.chat import chat_once
    from mint.project import load_project

    _quiet_transformers()
    reply = chat_once(prompt, base=base or load_project(config).base, system=system,
                      max_new_tokens=max_new_tokens)
    if json_out:
        return _print_json(reply)
    out.print(f"[bold]user:[/] {escape(reply.prompt)}", highlight=False)
    out.print(f"[bold]{reply.served_by} ({escape(reply.base)}):[/] {escape(reply.reply)}", highlight=False)
    err.print(f"{reply.new_tokens} tokens in {reply.seconds:.2f}s (load {reply.load_seconds:.1f}s)")


def _quiet_transformers() -> None:
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="trl")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


# --- registry ---------------------------------------------------------------------------------

def _revision_row(r) -> list[str]:
    return [r.ref, r.id[:12], r.status, r.method or "-", r.dataset or "-", (r.parent or "-")[:12], r.created_at]


@registry_app.command("ls")
def registry_ls(specialist: Optional[str] = typer.Option(None, "--specialist", "-s"),
                status: Optional[str] = typer.Option(None, "--status", help="candidate | champion | rejected | retired"),
                limit: int = typer.Option(20, "--limit"), offset: int = typer.Option(0, "--offset"),
                json_out: bool = JSON_OPT) -> None:
    """List revisions, newest first."""
    from mint.registry import store

    conn = store.open_store(_ws())
    try:
        page = store.list_revisions(conn, specialist=specialist, status=status, limit=limit, offset=offset)
    finally:
        conn.close()
    if json_out:
        return _print_json(page)
    table = Table(title=f"revisions {offset + 1}-{offset + len(page.revisions)} of {page.total:,}")
    for column in ("revision", "id", "status", "method", "dataset", "parent", "created"):
        table.add_column(column)
    for r in page.revisions:
        table.add_row(*_revision_row(r))
    out.print(table)


@registry_app.command("show")
def registry_show(ref: str, json_out: bool = JSON_OPT) -> None:
    """Show one revision: lineage fields, metrics, reports."""
    from mint.registry import store

    conn = store.open_store(_ws(), create=False)
    try:
        revision = store.resolve(conn, ref)
        reports = store.reports_for(conn, revision.id)
    finally:
        conn.close()
    if json_out:
        return _print_json({"revision": revision, "ref": revision.ref, "reports": reports})
    table = Table(show_header=False, title=revision.ref)
    for key, value in dataclasses.asdict(revision).items():
        table.add_row(key, escape(json.dumps(value) if isinstance(value, dict) else str(value)))
    table.add_row("reports", str(len(reports)))
    out.print(table)


@registry_app.command("lineage")
def registry_lineage(ref: str, json_out: bool = JSON_OPT) -> None:
    """The chain of parents of REF, with their datasets, methods and reports."""
    from mint.registry import store

    conn = store.open_store(_ws(), create=False)
    try:
        steps = store.lineage(conn, ref)
    finally:
        conn.close()
    if json_out:
        return _print_json({"lineage": steps})
    table = Table(title=f"lineage of {ref}")
    for column in ("revision", "id", "status", "method", "dataset", "base", "reports"):
        table.add_column(column)
    for step in steps:
        r = step.revision
        verdicts = ", ".join(f"{x['contract_name']} v{x['contract_version']}: {x['verdict']}" for x in step.reports)
        table.add_row(r.ref, r.id[:12], r.status, r.method or "-", r.dataset or "-", r.base or "-", verdicts or "-")
    out.print(table)


@registry_app.command("history")
def registry_history(specialist: str, json_out: bool = JSON_OPT) -> None:
    """Every alias move of SPECIALIST, oldest first."""
    from mint.registry import store

    conn = store.open_store(_ws())
    try:
        events = store.history(conn, specialist)
    finally:
        conn.close()
    if json_out:
        return _print_json({"events": events})
    table = Table(title=f"history of {specialist}")
    for column in ("#", "when", "who", "action", "old", "new", "contract", "reason"):
        table.add_column(column)
    for e in events:
        contract = f"{e.contract_name} v{e.contract_version}" if e.contract_name else "-"
        table.add_row(str(e.seq), e.at, f"{e.user}@{e.host}:{e.pid}", e.action, (e.old or "-")[:12],
                      (e.new or "-")[:12], contract, escape(e.reason or "-"))
    out.print(table)


@registry_app.command("import")
def registry_import(directory: Path, specialist: str = typer.Option(..., "--specialist", "-s"),
                    base: Optional[str] = typer.Option(None, "--base", "-b", help="Default: mint.yaml's base."),
                    config: Optional[Path] = typer.Option(None, "--config"), json_out: bool = JSON_OPT) -> None:
    """Register an external PEFT adapter (safetensors) after checking it fits the base."""
    from mint.project import load_project
    from mint.registry.transfer import import_adapter

    _quiet_transformers()
    revision = import_adapter(_ws(), directory, specialist=specialist, base=base or load_project(config).base)
    if json_out:
        return _print_json({"revision": revision, "ref": revision.ref})
    out.print(f"registered [bold]{revision.ref}[/] ({revision.id}) as a candidate")


@registry_app.command("export")
def registry_export(ref: str, out_path: Path = typer.Argument(..., metavar="OUT"),
                    force: bool = typer.Option(False, "--force"), json_out: bool = JSON_OPT) -> None:
    """Write REF as a plain PEFT directory (loads with PeftModel.from_pretrained and vLLM --lora-modules)."""
    from mint.registry.transfer import export_revision

    result = export_revision(_ws(), ref, out_path, force=force)
    if json_out:
        return _print_json(result)
    out.print(f"exported {result.revision} → {result.out} (base_model_name_or_path: {result.base_model_name_or_path})")


@registry_app.command("verify")
def registry_verify(ref: Optional[str] = typer.Argument(None), json_out: bool = JSON_OPT) -> None:
    """Recompute the sha256 of every file; exit 1 naming each file that differs or is missing."""
    from mint.registry.maintenance import verify

    result = verify(_ws(), ref)
    if json_out:
        _print_json({"checked": result.checked, "ok": result.ok, "problems": result.problems})
    else:
        for p in result.problems:
            err.print(f"[red]{p['revision']}[/]: {escape(p['problem'])}")
        out.print(f"checked {result.checked} revision(s): " + ("[green]all intact[/]" if result.ok
                                                               else f"[red]{len(result.problems)} problem(s)[/]"))
    if not result.ok:
        raise typer.Exit(1)


@registry_app.command("gc")
def registry_gc(keep: int = typer.Option(10, "--keep", help="Candidate/rejected revisions to keep per specialist."),
                dry_run: bool = typer.Option(False, "--dry-run"), json_out: bool = JSON_OPT) -> None:
    """Remove old candidate and rejected revisions (never a champion, an aliased revision or a kept one's parent)."""
    from mint.registry.maintenance import gc

    result = gc(_ws(), keep=keep, dry_run=dry_run)
    if json_out:
        return _print_json(result)
    verb = "would remove" if dry_run else "removed"
    for r in result.removed:
        out.print(f"{verb} {r['revision']} ({r['id'][:12]}, {r['status']})")
    out.print(f"{verb} {len(result.removed)} revision(s) and {len(result.orphans)} orphan folder(s); "
              f"{result.kept} kept")


@app.command()
def promote(ref: str, report: Optional[Path] = typer.Option(None, "--report", help="The eval report (default: the "
                                                                                     "newest registered one)."),
            force: bool = typer.Option(False, "--force", help="Skip the report checks (needs --why)."),
            why: Optional[str] = typer.Option(None, "--why"), json_out: bool = JSON_OPT) -> None:
    """Make REF the champion of its specialist if its report passed against the current champion."""
    from mint.registry.promotion import promote as run_promote

    _render_move(run_promote(_ws(), ref, report_path=report, force=force, why=why), json_out)


@app.command()
def reject(ref: str, why: str = typer.Option(..., "--why"), json_out: bool = JSON_OPT) -> None:
    """Mark REF rejected (it stays in the registry and the log)."""
    from mint.registry.promotion import reject as run_reject

    _render_move(run_reject(_ws(), ref, why=why), json_out)


@app.command()
def rollback(specialist: str, to: Optional[str] = typer.Option(None, "--to", help="A revision (default: the "
                                                                                   "previous champion)."),
             why: Optional[str] = typer.Option(None, "--why"), json_out: bool = JSON_OPT) -> None:
    """Re-point SPECIALIST:champion to the previous champion, or to --to REF."""
    from mint.registry.promotion import rollback as run_rollback

    _render_move(run_rollback(_ws(), specialist, to=to, why=why), json_out)


def _render_move(move, json_out: bool) -> None:
    if json_out:
        return _print_json(move)
    if move.action == "reject":
        out.print(f"rejected {move.new_ref}")
    else:
        out.print(f"{move.specialist}:champion → [bold]{move.new_ref}[/] ({move.new[:12]}), "
                  f"was {(move.old or 'none')[:12]} ({move.action})")


# --- train -----------------------------------------------------------------------------------------

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
    json_out: bool = JSON_OPT,
) -> None:
    """Train a specialist's LoRA adapter from its episodes and register it as a candidate revision."""
    from mint.train.run import train

    _quiet_transformers()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn(), console=err, transient=True,
                   disable=json_out or not err.is_terminal)
    task = bar.add_task("train", total=None, status="")

    def progress(step: int, total: int, logged: dict) -> None:
        status = "  ".join(f"{k} {logged[k]:.4g}" for k in ("loss", "reward", "tokens_per_s") if k in logged)
        bar.update(task, completed=step, total=total, status=status)

    with bar:
        result = train(_ws(), specialist=specialist, data=data, method=method, from_ref=from_ref, base=base,
                       config=config, sets=sets, resume=resume, num_processes=num_processes,
                       accelerate_config=accelerate_config, env=env, progress=progress)
    if json_out:
        return _print_json(result)
    resumed = f", resumed from step {result.resumed_from_step}" if result.resumed_from_step else ""
    loss = result.metrics.get("train_loss")
    out.print(f"[bold]{result.ref}[/] ({result.revision_id[:12]}): {result.method} on {result.examples} examples, "
              f"{result.steps} steps{resumed}, train loss {loss:.4g}" if loss is not None else f"[bold]{result.ref}[/]")
    out.print(f"run: {escape(result.run_dir)}")


# --- contracts and eval ----------------------------------------------------------------------------

@contract_app.command("check")
def contract_check(path: Path, json_out: bool = JSON_OPT) -> None:
    """Validate a contract and its suites' data without running anything (exit 2 with file:line: field)."""
    from mint.contract.schema import load_contract, read_suite

    contract = load_contract(path)
    suites = [{"name": s.name, "data": str(s.data), "records": len(read_suite(contract, s)), "limit": s.limit,
               "metrics": list(s.metrics)} for s in contract.suites]
    summary = {"contract": contract.name, "version": contract.version, "specialist": contract.specialist,
               "harness": contract.harness_name, "sha256": contract.sha256, "suites": suites,
               "gates": [dataclasses.asdict(g) for g in contract.gates], "ok": True}
    if json_out:
        return _print_json(summary)
    out.print(f"[green]ok[/] {escape(str(path))}: contract {contract.name} v{contract.version} "
              f"({contract.harness_name} harness), {len(suites)} suite(s), {len(contract.gates)} gate(s)")
    for s in suites:
        out.print(f"  {s['name']}: {s['records']} records from {escape(s['data'])}, metrics {', '.join(s['metrics'])}")


@app.command("eval")
def eval_command(ref: Optional[str] = typer.Argument(None, help="A revision, or `base` for the bare base."),
                 contract: Path = typer.Option(..., "--contract", "-c", help="The contract YAML."),
                 out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for report.json and "
                                                                               "predictions.jsonl."),
                 limit: Optional[int] = typer.Option(None, "--limit", help="At most N records per suite."),
                 predictions: Optional[Path] = typer.Option(None, "--predictions",
                                                            help="Score outputs produced elsewhere (JSONL)."),
                 base: Optional[str] = typer.Option(None, "--base", help="Base model (default: the revision's)."),
                 json_out: bool = JSON_OPT) -> None:
    """Evaluate REF under a contract: generate, score, gate against the champion. Exit 0 pass, 1 fail."""
    from mint.contract.evaluate import evaluate

    _quiet_transformers()
    bars = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeRemainingColumn(), console=err, transient=True, disable=json_out or not err.is_terminal)
    tasks: dict[str, Any] = {}

    def progress(suite: str, done: int, total: int) -> None:
        if suite not in tasks:
            tasks[suite] = bars.add_task(suite, total=total)
        bars.update(tasks[suite], completed=done)

    with bars:
        result = evaluate(_ws(), ref, contract, out_dir=out_dir, limit=limit, predictions=predictions, base=base,
                          progress=progress)
    report = result.report
    if json_out:
        _print_json({**report, "report_path": result.report_path, "predictions_path": result.predictions_path})
    else:
        c = report["contract"]
        table = Table(title=f"{report['revision']} under {c['name']} v{c['version']}")
        for column in ("metric", "value", "baseline", "rule", "result"):
            table.add_column(column)
        gated = {g["metric"]: g for g in report["gates"]}
        for metric, value in sorted(report["metrics"].items()):
            gate = gated.pop(metric, None)
            table.add_row(metric, f"{value:.4g}", _fmt(gate and gate["baseline"]), gate["rule"] if gate else "",
                          ("[green]pass[/]" if gate["passed"] else "[red]FAIL[/]") if gate else "")
        for metric, gate in gated.items():
            table.add_row(metric, _fmt(gate["value"]), _fmt(gate["baseline"]), gate["rule"],
                          "[green]pass[/]" if gate["passed"] else "[red]FAIL[/]")
        out.print(table)
        verdict = "[green]pass[/]" if result.passed else "[red]fail[/]"
        out.print(f"verdict: {verdict}  report: {escape(result.report_path)}")
        if result.baseline_evaluated:
            out.print("(the champion had no report under this contract version and was evaluated first)")
    if not result.passed:
        raise typer.Exit(1)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4g}"


@genui_app.command("render")
def genui_render(path: Path, out_path: Path = typer.Option(..., "-o", "--out", help="The HTML file to write."),
                 json_out: bool = JSON_OPT) -> None:
    """Render a UI4A component tree (a JSON file, or a model answer holding one) to static HTML."""
    from mint.harness.genui import render_file

    result = render_file(path, out_path)
    if json_out:
        return _print_json(result)
    out.print(f"wrote {escape(result['out'])} ({result['components']} components, "
              + ("valid" if result["valid"] else "[red]not valid[/]: " + escape("; ".join(result["problems"]))) + ")")


# --- entry point ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map MintError to its exit code, anything unexpected to 3."""
    try:
        code = app(args=argv, standalone_mode=False, prog_name="mint")
        return code if isinstance(code, int) else 0   # a raised typer.Exit comes back as its code
    except MintError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except (click.exceptions.Exit, typer.Exit) as exc:
        return exc.exit_code
    except (click.ClickException, _TyperClickException) as exc:   # unknown option, missing argument
        exc.show()
        return 2
    except (click.exceptions.Abort, typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        return 130
    except Exception:  # noqa: BLE001 - the last line of defence: a bug, reported as one
        err.print("[red]internal error[/] (a bug in mint; please report it with this trace):")
        err.print(traceback.format_exc(), markup=False, highlight=False)
        return 3


def entry() -> None:
    sys.exit(main())
