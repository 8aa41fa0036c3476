"""mint contract and mint eval."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from mint.cli.common import (
    DEVICE_OPT,
    JSON_OPT,
    ProgressLines,
    after_checks,
    app,
    baseline_description,
    choose_device,
    err,
    out,
    print_json,
    report_table,
    sub_app,
    ws,
)

contract_app = sub_app("contract", "Contracts: what \"better\" means for one specialist (the harness it runs in, the suites it is "
                                   "measured on, the gates a candidate must pass).")


@contract_app.command("check")
def contract_check(paths: list[Path] = typer.Argument(..., metavar="FILE"), json_out: bool = JSON_OPT) -> None:
    """Validate contracts and their suites' data without running anything (exit 2 with file:line: field).

    Says per suite the smallest difference it can resolve, and for coding contracts which isolation runs programs.

    \b
    Example:
      mint contract check contracts/*.yaml
    """
    from mint.contract.schema import check_contract

    summaries = [check_contract(path) for path in paths]
    if json_out:
        return print_json(summaries[0] if len(summaries) == 1 else {"contracts": summaries})
    for path, summary in zip(paths, summaries):
        _render_check(path, summary)


def _render_check(path: Path, summary) -> None:
    out.print(f"[green]ok[/] {escape(str(path))}: contract {summary.contract} v{summary.version} "
              f"({summary.harness} harness), {len(summary.suites)} suite(s), {len(summary.gates)} gate(s), "
              f"gate rules {summary.gate_rules} at {summary.confidence:.0%}")
    for s in summary.suites:
        resolves = (f"resolves pass/fail differences of {s.detectable:.0%} or more ({s.detectable_examples} of "
                    f"{s.records} examples, all one way)" if s.detectable is not None
                    else "too small to show any difference as significant")
        if s.records is None:     # a live suite: its records exist only in a workspace, read by `mint eval`
            what = f"the held-out requests of the served traffic ({escape(s.data)})" if s.data.startswith("traffic:") \
                else f"the held-out split of {escape(s.data)}"
            cap = min(x for x in (s.limit, s.planned) if x) if s.limit or s.planned else None
            out.print(f"  {s.name}: {what}, read when evaluated{f', up to {cap} records' if cap else ''}, "
                      f"metrics {', '.join(s.metrics)}")
            continue
        sized = f" (the first {s.records} of {s.available}: what its gates' detect needs)" \
            if s.planned is not None and s.available is not None and s.available > s.records else ""
        out.print(f"  {s.name}: {s.records} records from {escape(s.data)}{sized}, metrics {', '.join(s.metrics)}; "
                  f"{resolves}")
    for plan in summary.plans:
        out.print(f"  gate {plan.metric} {plan.rule}: {escape(plan.reads) or 'resolved once its suite is read'}")
    if summary.judge:
        where = summary.judge["endpoint"]
        who = "the evaluation's base on mint's engine" if where == "local" else f"{where['model']} at {where['url']}"
        floor = summary.judge["floor"]
        scale = (summary.judge.get("score") or {}).get("scale")
        rates = f"; rates each answer from {scale[0]} to {scale[1]} (judge_score)" if scale else ""
        out.print(f"  judge: {escape(who)}; calibrated on {summary.judge['pairs']} pairs of "
                  f"{escape(summary.judge['calibration'])} (floor: agreement {floor['agreement']:g}, flips "
                  f"{floor['flips']:g}) before each evaluation{rates}", highlight=False)
    for warning in summary.warnings:
        out.print(f"  [yellow]warning[/]: {escape(warning)}")
    if summary.isolation:
        out.print(f"  programs run under [bold]{summary.isolation['isolation']}[/]: {escape(summary.isolation['detail'])}")


@app.command("eval")
def eval_command(refs: Optional[list[str]] = typer.Argument(
                     None, metavar="REF", help="Revisions, or `base` for the bare base; several decode as one "
                                                    "stream, each with its own report."),
                 contract: Path = typer.Option(..., "--contract", "-c", help="The contract YAML."),
                 out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for report.json and "
                                                                               "predictions.jsonl."),
                 limit: Optional[int] = typer.Option(None, "--limit", help="At most N records per suite."),
                 predictions: Optional[Path] = typer.Option(None, "--predictions",
                                                            help="Score outputs produced elsewhere (JSONL)."),
                 baseline_predictions: Optional[Path] = typer.Option(
                     None, "--baseline-predictions", help="With --predictions: the baseline's outputs (JSONL), "
                     "scored the same way (default: the champion's registered report, else no baseline)."),
                 base: Optional[str] = typer.Option(None, "--base", help="Base model (default: the revision's)."),
                 no_reuse: bool = typer.Option(False, "--no-reuse", help="Decode every answer again, even those a "
                                               "registered report of the revision already holds for the same "
                                               "prompt, decoding settings, precision and base."),
                 stop_when_decided: bool = typer.Option(
                     False, "--stop-when-decided", help="Decode the suites a gain is asked on first, and nothing "
                     "more for a revision that failed a gate there (its verdict is fail whatever the rest shows)."),
                 device: str = DEVICE_OPT,
                 engine: Optional[str] = typer.Option(
                     None, "--engine", help="Where answers are decoded: `local` (mint's engine) or the URL of an "
                     "OpenAI-compatible server that loads LoRA adapters at runtime, such as vLLM (default: mint.yaml's "
                     "`engine`, else local)."),
                 json_out: bool = JSON_OPT) -> None:
    """Evaluate REF under a contract: generate, score, gate against the champion (the bare base before there is
    one), paired by example with 95% intervals. Several REFs (and any baseline without a report) decode as one
    mixed-adapter stream, each getting the report it gets alone. Exit 0 pass, 1 fail (any of them).

    \b
    Examples:
      mint eval genui:v2 --contract contracts/genui.yaml
      mint eval genui:v3 genui:v4 genui:v5 --contract contracts/genui.yaml
    """
    from mint.contract.evaluate import evaluate, evaluate_many
    from mint.errors import BadInput

    choose_device(device, "decode", json_out, say=False)    # said once the request's checks have passed
    checked = after_checks("decode", json_out)
    refs = list(refs or [])
    if len(refs) > 1 and (predictions is not None or out_dir is not None):
        raise BadInput("--predictions and --out take one revision; evaluate several without them",
                       field="--predictions" if predictions is not None else "--out")
    workspace = ws(writes=True)
    with ProgressLines(enabled=not json_out) as bars:
        def started() -> None:
            checked()
            if not bars.live and bars.enabled:   # a log shows what runs before its first finished example
                err.print(f"evaluating {' '.join(refs) or 'base'} under {contract} ...", highlight=False,
                          markup=False)

        if len(refs) > 1:
            results = evaluate_many(workspace, refs, contract, limit=limit, base=base, progress=bars.update,
                                    reuse=not no_reuse, stop_when_decided=stop_when_decided, engine=engine,
                                    started=started)
        else:
            results = [evaluate(workspace, refs[0] if refs else None, contract, out_dir=out_dir, limit=limit,
                                predictions=predictions, base=base, progress=bars.update,
                                baseline_predictions=baseline_predictions, reuse=not no_reuse,
                                stop_when_decided=stop_when_decided, engine=engine, started=started)]
    shown = [{**r.report.to_dict(), "report_path": r.report_path, "predictions_path": r.predictions_path}
             for r in results]
    if json_out:
        print_json(shown[0] if len(shown) == 1 else {"reports": shown})
    else:
        for result in results:
            _render_report(result)
    if not all(result.passed for result in results):
        raise typer.Exit(1)


def _render_judge(judge: dict) -> None:
    """The judge's lines under an evaluation's table: its calibration, calls, verdicts per suite and flags."""
    calibration = judge.get("calibration") or {}
    ratings = judge.get("ratings") or {}
    counted = [judge.get("calls") or {}, ratings.get("calls") or {}, calibration.get("calls") or {}]
    made = sum(calls.get("made", 0) for calls in counted)
    cached = sum(calls.get("cached", 0) for calls in counted)
    measured = []
    if "agreement" in calibration:
        measured.append(f"agreement {calibration['agreement']:.0%}, flips {calibration.get('flip_rate', 0):.0%}")
    if "score_agreement" in calibration:
        measured.append(f"better answer rated higher {calibration['score_agreement']:.0%}")
    out.print(f"judge: {escape(str(judge.get('endpoint')))}; calibration {', '.join(measured)} on "
              f"{calibration.get('pairs')} pairs; {made} call(s) made, {cached} taken from the cache", highlight=False)
    for name, counts in (judge.get("suites") or {}).items():
        degenerate = counts.get("degenerate") or {}
        out.print(f"  {escape(name)}: {counts['wins']} won, {counts['losses']} lost, {counts['ties']} tied of "
                  f"{counts['examples']}; {counts['flipped']} of {counts['judged_pairs']} judged pair(s) flipped with "
                  f"the order; {degenerate.get('candidate', 0)} answer(s) addressed the judge (lost)", highlight=False)
    scale = ratings.get("scale") or ["?", "?"]
    for name, counts in (ratings.get("suites") or {}).items():
        mean = f"{counts['mean']:.2f}" if counts.get("mean") is not None else "none"
        out.print(f"  {escape(name)}: rated {mean} on average ({scale[0]} to {scale[1]}) over {counts['examples']} "
                  f"example(s); {counts['degenerate']} answer(s) addressed the judge (rated {scale[0]})",
                  highlight=False)
    for flag in judge.get("flags") or []:
        out.print(f"[yellow]flag[/]: {escape(flag)}")


def _render_report(result) -> None:
    from mint.contract.served import engine_text

    report = result.report
    out.print(report_table(report))
    out.print(f"baseline: {escape(baseline_description(report))}"
              "; deltas are paired by example with 95% intervals (see the report's `statistics`)")
    if report.source == "generated":
        out.print(f"engine: {escape(engine_text(report))}", highlight=False)
    if report.precision:
        out.print(f"precision: {report.precision['used']}, candidate and baseline alike "
                  f"({escape(report.precision['reason'])})")
    for name, drawn in (report.live_suites if isinstance(report.live_suites, dict) else {}).items():
        if isinstance(drawn, dict) and drawn.get("traffic"):
            since = f" since {drawn['since']}" if drawn.get("since") else ""
            out.print(f"suite {escape(name)}: {drawn['count']} held-out request(s) of the served traffic "
                      f"({escape(drawn['traffic'])}{since}; {drawn['heldout_share']:g} of it held out)")
        for plan in (drawn.get("underpowered") or []) if isinstance(drawn, dict) else []:
            out.print(f"[yellow]under-powered[/]: {escape(plan['metric'])} {escape(plan['rule'])} on "
                      f"{plan['examples']} example(s): {escape(plan['reads'])}")
    if isinstance(report.extra.get("judge"), dict):
        _render_judge(report.extra["judge"])
    verdict = "[green]pass[/]" if result.passed else "[red]fail[/]"
    out.print(f"verdict: {verdict}  report: {escape(result.report_path)}")
    if result.baseline_evaluated:
        out.print("(the baseline had no report on these examples under this contract and was evaluated first)")
