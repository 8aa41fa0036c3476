"""mint ingest and mint data: logs in, dataset versions out."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from mint.cli.common import (
    JSON_OPT,
    ProgressLines,
    app,
    counted,
    err,
    out,
    print_json,
    problems,
    quiet_datasets,
    sub_app,
    ws,
)

data_app = sub_app("data", "Dataset versions made by `mint ingest`.")


@app.command()
def ingest(
    paths: list[Path] = typer.Argument(..., help="Log files or folders (JSONL, JSON, .gz, Parquet, saved HF datasets, LLaMA-Factory folders with their dataset_info.json)."),
    dataset: str = typer.Option("default", "--dataset", "-d", help="Dataset to add a version to."),
    formats: list[str] = typer.Option(["auto"], "--format", "-f", help="auto | openai | sharegpt | mint | hf | "
                                      "alpaca | prompt_completion | preference, for every path; or FILE=FORMAT for "
                                      "one file (repeatable)."),
    specialist: Optional[str] = typer.Option(None, "--specialist", "-s",
                                             help="Label every record as this specialist's (a public dataset "
                                                  "meant for one specialist)."),
    no_scrub: bool = typer.Option(False, "--no-scrub", help="Keep PII and secrets as they are."),
    max_record_bytes: int = typer.Option(1_000_000, "--max-record-bytes", help="Larger records are quarantined."),
    json_out: bool = JSON_OPT,
) -> None:
    """Turn interaction logs into a new immutable version of a dataset (scrubbed, deduplicated, labeled).

    \b
    Example:
      mint ingest logs/ .mint/logs --dataset prod
    """
    from mint.data.ingest import ingest as run_ingest
    from mint.project import load_project

    project = load_project()
    fmt, file_formats = "auto", {}
    for entry in formats:
        name, sep, value = entry.rpartition("=")
        if sep:
            file_formats[Path(name)] = value
        else:
            fmt = value
    with _ByteProgress(enabled=not json_out) as progress:
        result = run_ingest(ws(writes=True), paths, dataset=dataset, fmt=fmt, project=project, scrub=not no_scrub,
                            max_record_bytes=max_record_bytes, progress=progress.advance, specialist=specialist,
                            file_formats=file_formats)
    if json_out:
        print_json(result)
        _exit_if_nothing_kept(result)
        return
    table = Table(title=f"ingest → {result.dataset}")
    for column in ("source", "read", "kept", "duplicate", "quarantined", "pairs", "scrubbed"):
        table.add_column(column, justify="left" if column == "source" else "right",
                         overflow="fold" if column == "source" else "ellipsis")
    for s in result.sources:
        table.add_row(escape(s.path), f"{s.read:,}", f"{s.kept:,}", f"{s.duplicate:,}",
                      f"[red]{s.quarantined:,}[/]" if s.quarantined else "0", f"{s.pairs:,}", f"{s.scrubbed:,}")
    out.print(table)
    if result.by_specialist:
        out.print("new episodes by specialist: " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(result.by_specialist.items(), key=lambda kv: -kv[1])))
    if result.unmatched_note:
        out.print(escape(result.unmatched_note))
    if result.scrubbed:
        out.print("scrubbed: " + ", ".join(f"{k} {v:,}" for k, v in sorted(result.scrubbed.items())))
    if result.skipped:
        shown = ", ".join(escape(p) for p in result.skipped[:10])
        more = f" and {len(result.skipped) - 10} more" if len(result.skipped) > 10 else ""
        out.print(f"[yellow]skipped {len(result.skipped)} file(s) that are not logs[/]: {shown}{more}")
    if result.episodes_updated:
        out.print(f"updated {result.episodes_updated:,} earlier episode(s) (later feedback or a longer re-log)")
    if result.reasons:
        out.print("quarantined: " + "; ".join(f"{escape(k)} ×{v}" for k, v in sorted(result.reasons.items()))
                  + f"  → {escape(result.quarantine_file)} (`mint data quarantine {escape(result.dataset)}` shows "
                  "each record's file, line, field and value)")
    if result.created:
        out.print(f"[green]version {result.version}[/] of {result.dataset}: +{counted(result.episodes_added, 'episode')}, "
                  f"{result.total_episodes:,} in all ({result.seconds:.1f}s)")
    else:
        out.print(f"nothing new: {result.dataset} stays at version {result.version or '(empty)'}")
    _exit_if_nothing_kept(result)


def _exit_if_nothing_kept(result) -> None:
    """Name every source that kept nothing, with its top quarantine reasons and what to do; exit 2 when no
    source kept anything (a warning when others did). Empty sources are named, and exit 0: an empty log is
    a day nothing was logged, which a nightly ingest must not fail on."""
    for source in result.sources:
        if source.empty:
            err.print(f"note: {escape(source.path)} is empty: nothing to read")
        elif source.hint and not source.kept_nothing:
            err.print(f"[yellow]warning[/]: {escape(source.path)}: {source.quarantined:,} record(s) quarantined; "
                      f"{escape(source.hint)}")
    for source in result.failed_sources:
        top = sorted(source.reasons.items(), key=lambda kv: -kv[1])[:3]
        level = "error" if result.kept_nothing else "[yellow]warning[/]"
        hint = source.hint or "try --format FILE=FORMAT"
        (problems if result.kept_nothing else err).print(
            f"{level}: {escape(source.path)}: kept none of its {source.read:,} record(s); top reasons: "
            + "; ".join(f"{escape(k)} ×{v}" for k, v in top)
            + f" ({escape(hint)}; see `mint data quarantine {escape(result.dataset)}`)")
    if result.kept_nothing:
        raise typer.Exit(2)


class _ByteProgress:
    """Progress per source, shown only for sources big enough to take a while: a bar with bytes and ETA on a
    terminal, plain lines (MiB read of MiB) when stderr is a pipe."""

    MIN_BYTES = 8 << 20

    def __init__(self, enabled: bool) -> None:
        self.lines = ProgressLines(enabled=enabled)
        self.live = self.lines.live
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TimeRemainingColumn(), console=err, transient=True, disable=not self.live)
        self.tasks: dict[str, Any] = {}
        self.read: dict[str, int] = {}

    def __enter__(self) -> "_ByteProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def advance(self, label: str, n: int, total: int) -> None:
        if not self.lines.enabled or total < self.MIN_BYTES:
            return
        if self.live:
            task = self.tasks.get(label)
            if task is None:
                task = self.tasks[label] = self.progress.add_task(label, total=total)
            self.progress.advance(task, n)
            return
        self.read[label] = self.read.get(label, 0) + n
        self.lines.update(f"{label} (MiB)", self.read[label] >> 20, total >> 20)


@data_app.command("ls")
def data_ls(json_out: bool = JSON_OPT) -> None:
    """List datasets with their current version and episode counts.

    \b
    Example:
      mint data ls
    """
    from mint.data.datasets import list_datasets

    rows = list_datasets(ws())
    if json_out:
        return print_json({"datasets": rows})
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
def data_show(name: str, version: Optional[str] = typer.Option(None, "--version",
                                                               help="Hash prefix or vN (default: latest)."),
              head: int = typer.Option(5, "--head", "-n", help="How many episodes to print."),
              json_out: bool = JSON_OPT) -> None:
    """Show a dataset version's manifest, its history and its first episodes.

    \b
    Example:
      mint data show prod --version v2 --head 3
    """
    from mint.data.datasets import show_dataset

    view = show_dataset(ws(), name, version, head)
    if json_out:
        return print_json(view)
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
        for message in (episode.get("preference") or {}).get("rejected", []):
            text = message["content"] or json.dumps(message.get("tool_calls"), ensure_ascii=False)
            out.print(f"  [bold red]rejected {message['role']}:[/] {escape(text[:200])}", highlight=False)


@data_app.command("quarantine")
def data_quarantine(name: str = typer.Argument(..., metavar="DATASET"),
                    limit: int = typer.Option(20, "--limit", "-n", help="Show the newest N entries."),
                    reason: Optional[str] = typer.Option(None, "--reason", help="Only entries whose reason holds "
                                                                                "this text, e.g. 'unknown role'."),
                    clear: bool = typer.Option(False, "--clear", help="Remove every entry (failed tries)."),
                    clear_source: Optional[Path] = typer.Option(None, "--clear-source", metavar="FILE",
                                                                help="Remove the entries that came from FILE (or "
                                                                     "from the files in a folder)."),
                    json_out: bool = JSON_OPT) -> None:
    """What ingest set aside for DATASET: each reason with its count, then the newest entries with their file,
    line, field and the value found there. --clear or --clear-source FILE removes entries of failed tries.

    \b
    Examples:
      mint data quarantine prod --reason "unknown role"
      mint data quarantine prod --clear-source logs/wrong-format.jsonl
    """
    from mint.data.datasets import clear_quarantine, read_quarantine

    if clear or clear_source is not None:
        cleared = clear_quarantine(ws(writes=True), name, source=clear_source)
        if json_out:
            return print_json(cleared)
        out.print(f"removed {counted(cleared.removed, 'entry', 'entries')} from the quarantine of {escape(name)}"
                  + "".join(f"; {escape(file)} ×{n}" for file, n in sorted(cleared.removed_by_file.items())[:10])
                  + f" ({cleared.left:,} left)")
        return
    view = read_quarantine(ws(), name, limit=limit, reason=reason)
    if json_out:
        return print_json(view)
    if not view.total:
        out.print(f"nothing quarantined in {escape(name)}: every record ingest read became an episode")
        return
    out.print(f"{counted(view.total, 'record')} set aside in {escape(name)} ({escape(view.file)}): "
              + "; ".join(f"{escape(kind)} ×{n}" for kind, n in view.reasons.items()))
    if not view.entries:
        out.print(f"no entry's reason holds {escape(repr(reason))}")
        return
    table = Table(title=f"the newest {counted(len(view.entries), 'entry', 'entries')}")
    for column in ("where", "field", "value", "reason"):
        table.add_column(column, overflow="fold")
    for e in view.entries:
        where = f"{e.file}:{e.line}" if e.line is not None else e.file
        value = e.value if e.value is not None else (e.raw[:80] if e.field is None and e.raw else "-")
        table.add_row(escape(where), escape(e.field or "(record)"), escape(value), escape(e.reason))
    out.print(table)


@data_app.command("export")
def data_export(name: str, out_path: Path = typer.Argument(..., metavar="OUT"),
                fmt: str = typer.Option("openai", "--format", "-f", help="openai (JSONL file) | hf (save_to_disk folder)"),
                version: Optional[str] = typer.Option(None, "--version",
                                                      help="Hash prefix or vN (default: latest)."),
                specialist: Optional[str] = typer.Option(None, "--specialist", "-s",
                                                         help="Only episodes labeled with this specialist."),
                min_rating: Optional[int] = typer.Option(
                    None, "--min-rating", help="Leave out episodes rated lower (-1, 0 or 1; unrated counts as 0). "
                    "Default: 0 for openai, so thumbs-down answers are left out (or replaced by their "
                    "correction); none for hf."),
                split: str = typer.Option("train", "--split", help="train (what `mint train` sees) | heldout "
                                          "(what live contract suites draw) | all."),
                trl_type: str = typer.Option("auto", "--type", help="hf: TRL's dataset type, preference (prompt, "
                                             "chosen, rejected: DPOTrainer reads the folder as it is) or "
                                             "conversation (messages); auto: preference when every episode is a "
                                             "pair."),
                force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
                json_out: bool = JSON_OPT) -> None:
    """Write a dataset version for other tools: OpenAI chat JSONL or a Hugging Face dataset folder (TRL's
    columns). Prints what it left out and why (the held-out split, thumbs-down answers, other specialists).

    \b
    Examples:
      mint data export default train.jsonl --specialist coding --min-rating 1
      mint data export prefs prefs-hf --format hf   # preference pairs: load_from_disk, then DPOTrainer
    """
    from mint.data.datasets import export_dataset

    if fmt == "hf":
        quiet_datasets()     # datasets' own progress bars ("Saving the dataset") stay off; --verbose shows them
    result = export_dataset(ws(), name, fmt, out_path, version, specialist, force,
                            min_rating="default" if min_rating is None else min_rating, split=split,
                            trl_type=trl_type)
    if json_out:
        return print_json(result)
    shape = {"preference": " (TRL preference: prompt, chosen, rejected)",
             "conversation": " (TRL conversational: messages)"}.get(result.trl_type or "", "")
    out.print(f"exported {counted(result.episodes, 'episode')} of {result.dataset}@{result.version} "
              f"({result.split} split) as {result.format}{shape} → {result.out}")
    if result.trl_type == "conversation" and result.preference_pairs:
        out.print(f"{counted(result.preference_pairs, 'preference pair')} keep their rejected answers in the "
                  "`preference` column; --type preference writes them as TRL's prompt, chosen and rejected")
    if result.left_out:
        out.print("left out: " + "; ".join(f"{escape(why)} {n:,}" for why, n in result.left_out.items()))
