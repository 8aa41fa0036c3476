"""mint registry, promote, reject, rollback."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import (
    JSON_OPT,
    app,
    err,
    out,
    print_json,
    quiet_transformers,
    sub_app,
    ws,
)

registry_app = sub_app("registry", "Adapter revisions, aliases and the event log.")


def _revision_row(r) -> list[str]:
    return [r.ref, r.id[:12], r.status, r.method or "-", r.dataset or "-", (r.parent or "-")[:12], r.created_at]


@registry_app.command("ls")
def registry_ls(specialist: Optional[str] = typer.Option(None, "--specialist", "-s", help="Only this specialist's revisions."),
                status: Optional[str] = typer.Option(None, "--status", help="candidate | champion | rejected | retired"),
                limit: int = typer.Option(20, "--limit", help="Revisions per page."),
                offset: int = typer.Option(0, "--offset", help="Skip this many (newest first)."),
                json_out: bool = JSON_OPT) -> None:
    """List revisions, newest first.

    \b
    Example:
      mint registry ls --specialist coding --status candidate
    """
    from mint.registry import queries

    page = queries.list_page(ws(), specialist=specialist, status=status, limit=limit, offset=offset)
    if json_out:
        return print_json(page)
    if page.total == 0 and specialist is None and status is None:
        out.print("no revisions yet: `mint train --specialist S --data D --method sft` registers one")
        return
    table = Table(title=f"revisions {offset + 1}-{offset + len(page.revisions)} of {page.total:,}")
    for column in ("revision", "id", "status", "method", "dataset", "parent", "created"):
        table.add_column(column)
    for r in page.revisions:
        table.add_row(*_revision_row(r))
    out.print(table)


@registry_app.command("show")
def registry_show(ref: str, json_out: bool = JSON_OPT) -> None:
    """Show one revision: lineage fields, metrics, reports.

    \b
    Example:
      mint registry show coding:champion
    """
    from mint.registry import queries

    detail = queries.show(ws(), ref)
    revision, reports = detail.revision, detail.reports
    if json_out:
        return print_json(detail)
    table = Table(show_header=False, title=revision.ref)
    for key, value in dataclasses.asdict(revision).items():
        table.add_row(key, escape(json.dumps(value) if isinstance(value, dict) else str(value)))
    table.add_row("reports", str(len(reports)))
    out.print(table)


@registry_app.command("lineage")
def registry_lineage(ref: str, json_out: bool = JSON_OPT) -> None:
    """The chain of parents of REF, with their datasets, methods and reports.

    \b
    Example:
      mint registry lineage genui:v3
    """
    from mint.registry import queries

    steps = queries.lineage(ws(), ref)
    if json_out:
        return print_json({"lineage": steps})
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
    """Every alias move of SPECIALIST, oldest first.

    \b
    Example:
      mint registry history genui
    """
    from mint.registry import queries

    workspace = ws()
    events = queries.history(workspace, specialist)
    names = queries.refs(workspace, [i for e in events for i in (e.old, e.new)])
    if json_out:
        return print_json({"events": events, "refs": names})
    if not events:
        out.print(f"no events for {escape(specialist)} yet: `mint promote {escape(specialist)}:vN` makes the first")
        return
    table = Table(title=f"history of {specialist}")
    for column in ("#", "when", "who", "action", "old", "new", "contract", "reason"):
        table.add_column(column)
    for e in events:
        contract = f"{e.contract_name} v{e.contract_version}" if e.contract_name else "-"
        table.add_row(str(e.seq), e.at, f"{e.user}@{e.host}:{e.pid}", e.action,
                      names.get(e.old, (e.old or "-")[:12]), names.get(e.new, (e.new or "-")[:12]), contract,
                      escape(e.reason or "-"))
    out.print(table)


@registry_app.command("import")
def registry_import(directory: Path,
                    specialist: str = typer.Option(..., "--specialist", "-s", help="One of mint.yaml's specialists."),
                    base: Optional[str] = typer.Option(None, "--base", "-b",
                                                       help="Default: the base the adapter's adapter_config.json "
                                                            "names, else mint.yaml's base."),
                    new: bool = typer.Option(False, "--new", help="Start a specialist that mint.yaml does not list."),
                    json_out: bool = JSON_OPT) -> None:
    """Register an external PEFT adapter (safetensors) after checking it fits the base.

    \b
    Example:
      mint registry import ./my-lora --specialist coding
    """
    from mint.registry.transfer import import_adapter

    quiet_transformers()
    result = import_adapter(ws(writes=True), directory, specialist=specialist, base=base, new=new)
    if json_out:
        return print_json(result)
    out.print(f"registered [bold]{result.ref}[/] ({result.revision.id}) as a candidate, on base "
              f"{escape(result.base)} (from {result.base_from})")
    for item in result.skipped:
        err.print(f"not imported: {escape(item)}")


@registry_app.command("export")
def registry_export(ref: str, out_path: Path = typer.Argument(..., metavar="OUT"),
                    force: bool = typer.Option(False, "--force", help="Replace OUT if it is a previous export "
                                                                      "(never any other folder)."),
                    json_out: bool = JSON_OPT) -> None:
    """Write REF as a plain PEFT directory (loads with PeftModel.from_pretrained and vLLM --lora-modules).

    \b
    Example:
      mint registry export coding:champion out/coding
    """
    from mint.registry.transfer import export_revision

    result = export_revision(ws(), ref, out_path, force=force)
    if json_out:
        return print_json(result)
    out.print(f"{'replaced the export' if result.replaced else 'exported'} {result.revision} → {escape(result.out)} "
              f"(base_model_name_or_path: {escape(result.base_model_name_or_path)})")
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)


@registry_app.command("verify")
def registry_verify(ref: Optional[str] = typer.Argument(None), json_out: bool = JSON_OPT) -> None:
    """Recompute the sha256 of every file and check the event chain; exit 1 naming each problem.

    \b
    Example:
      mint registry verify
    """
    from mint.registry.maintenance import verify

    result = verify(ws(), ref)
    if json_out:
        print_json({"checked": result.checked, "ok": result.ok, "problems": result.problems})
    else:
        for p in result.problems:
            where = p["revision"] if "revision" in p else "event log"
            err.print(f"[red]{where}[/]: {escape(p['problem'])}")
        out.print(f"checked {result.checked} revision(s): " + ("[green]all intact[/]" if result.ok
                                                               else f"[red]{len(result.problems)} problem(s)[/]"))
    if not result.ok:
        raise typer.Exit(1)


@registry_app.command("gc")
def registry_gc(keep: int = typer.Option(10, "--keep", help="Candidate/rejected revisions to keep per specialist."),
                dry_run: bool = typer.Option(False, "--dry-run", help="List what would be removed; remove nothing."),
                json_out: bool = JSON_OPT) -> None:
    """Remove old candidate and rejected revisions (never a champion, an aliased revision or a kept one's parent).

    \b
    Example:
      mint registry gc --keep 5 --dry-run
    """
    from mint.registry.maintenance import gc

    result = gc(ws(writes=True), keep=keep, dry_run=dry_run)
    if json_out:
        return print_json(result)
    verb = "would remove" if dry_run else "removed"
    for r in result.removed:
        out.print(f"{verb} {r['revision']} ({r['id'][:12]}, {r['status']})")
    out.print(f"{verb} {len(result.removed)} revision(s) and {len(result.orphans)} orphan folder(s); "
              f"{result.kept} kept")
    if result.staging_busy:
        out.print("a train or import is writing a revision: staging folders were left alone; run gc again later")


@registry_app.command("migrate")
def registry_migrate(to: str = typer.Option(..., "--to", help="The empty shared registry, "
                                                             "postgresql://USER@HOST:PORT/DB."),
                     json_out: bool = JSON_OPT) -> None:
    """Copy this workspace's SQLite registry into PostgreSQL, its event history intact (verified before it commits).

    \b
    Example:
      mint registry migrate --to postgresql://mint@db:5432/mint
    """
    from mint.registry.migrate import migrate

    result = migrate(ws(), to)
    if json_out:
        return print_json(result)
    copied = ", ".join(f"{n} {table}" for table, n in result.rows.items())
    out.print(f"copied {copied} from {result.source} to {result.target}; the event chain verifies. "
              f"Use it with MINT_REGISTRY_URL={result.target}")


@app.command()
def promote(ref: str, report: Optional[Path] = typer.Option(None, "--report", help="The eval report (default: the "
                                                                                     "newest registered one)."),
            force: bool = typer.Option(False, "--force", help="Skip the report checks (needs --why)."),
            why: Optional[str] = typer.Option(None, "--why", help="The reason for --force, kept in the event log."),
            json_out: bool = JSON_OPT) -> None:
    """Make REF the champion of its specialist if its registered report passed against the current champion
    (or the bare base), measured on the same examples.

    \b
    Example:
      mint promote genui:v2
    """
    from mint.contract.identity import contract_identity
    from mint.registry.promotion import promote as run_promote

    _render_move(run_promote(ws(writes=True), ref, report_path=report, force=force, why=why,
                             identify_contract=contract_identity), json_out)


@app.command()
def reject(ref: str, why: str = typer.Option(..., "--why", help="The reason, kept in the event log."), json_out: bool = JSON_OPT) -> None:
    """Mark REF rejected (it stays in the registry and the log).

    \b
    Example:
      mint reject coding:v4 --why "answers in Java"
    """
    from mint.registry.promotion import reject as run_reject

    _render_move(run_reject(ws(writes=True), ref, why=why), json_out)


@app.command()
def rollback(specialist: str,
             why: Optional[str] = typer.Option(None, "--why", help="Why (required; the event log keeps it)."),
             expect: Optional[str] = typer.Option(None, "--expect", metavar="REF",
                                                  help="The champion you are rolling away from, as you saw it; "
                                                       "refused if it has moved since."),
             to: Optional[str] = typer.Option(None, "--to", metavar="REF",
                                              help="An earlier champion (default: the one before the current)."),
             json_out: bool = JSON_OPT) -> None:
    """Re-point SPECIALIST:champion to the champion before it in the event history (or --to an earlier one).

    \b
    Example:
      mint rollback coding --expect coding:v7 --why "v7 breaks JSON output"
    """
    from mint.registry.promotion import rollback as run_rollback

    _render_move(run_rollback(ws(writes=True), specialist, why=why, expect=expect, to=to), json_out)


def _render_move(move, json_out: bool) -> None:
    if json_out:
        return print_json(move)
    if move.action == "reject":
        out.print(f"rejected {move.new_ref}")
    elif move.action == "unchanged":
        out.print(f"{move.new_ref} is already the champion of {move.specialist}; nothing changed")
    else:
        out.print(f"{move.specialist}:champion → [bold]{move.new_ref}[/] ({move.new[:12]}), "
                  f"was {(move.old or 'none')[:12]} ({move.action})")
