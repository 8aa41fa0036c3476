"""mint runs ls/show: what a user sees of finished and killed training runs."""
import json

from mint.cli import main
from mint.data.ingest import ingest
from mint.runs import list_runs, show_run
from mint.train.run import train
from tests.conftest import write_jsonl


def _dataset(ws, project, tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"Write python returning {i}"},
                          {"role": "assistant", "content": f"def f():\n    return {i}"}], "specialist": "coding"}
            for i in range(6)]
    ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", rows)], dataset="logs", project=project)
    return "logs"


def test_a_finished_run_lists_with_method_steps_loss_and_revision(ws, project, tmp_path, capsys):
    data = _dataset(ws, project, tmp_path)
    result = train(ws, specialist="coding", data=data, method="sft", base="tiny-random",
                   sets=["max_steps=2", "per_device_train_batch_size=2", "lora.r=4", "max_length=64",
                         "logging_steps=1"])
    (row,) = list_runs(ws)
    assert (row.run, row.method, row.specialist, row.status) == (result.run, "sft", "coding", "finished")
    assert row.steps == 2 and row.revision == "coding:v1" and row.dataset.startswith("logs@")
    assert row.final_loss is not None and row.final_loss > 0
    assert main(["runs", "ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["revision"] == "coding:v1"
    assert main(["runs", "show", result.run[:12], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["summary"]["run"] == result.run and any("loss" in m for m in shown["metrics"])
    assert main(["runs", "show", result.run]) == 0
    assert "coding:v1" in capsys.readouterr().out


def test_a_killed_run_lists_as_unfinished_and_a_cut_metrics_line_is_skipped(ws):
    folder = ws.home / "runs" / "genui-sft-20261130-000000-1"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run": folder.name, "specialist": "genui", "method": "sft",
                                                 "dataset": "d@abc", "base": "tiny-random"}))
    (folder / "metrics.jsonl").write_text('{"event": "start", "step": 0, "max_steps": 10, "time": 100}\n'
                                          '{"step": 3, "loss": 1.5, "time": 130}\n{"step": 4, "lo')
    (row,) = list_runs(ws)
    assert row.status == "unfinished" and row.steps == 3 and row.max_steps == 10 and row.final_loss == 1.5
    assert row.duration_s == 30 and row.revision is None
    assert show_run(ws, "genui").summary.run == folder.name


def test_an_unknown_or_ambiguous_run_is_exit_2_naming_recent_runs(ws, capsys):
    for name in ("coding-sft-1", "coding-sft-2"):
        (ws.home / "runs" / name).mkdir(parents=True)
        (ws.home / "runs" / name / "run.json").write_text("{}")
    assert main(["runs", "show", "nope"]) == 2
    assert "recent: coding-sft" in capsys.readouterr().err
    assert main(["runs", "show", "coding-sft"]) == 2
    assert "matches 2 runs" in capsys.readouterr().err


def test_piped_runs_ls_keeps_each_run_id_whole_on_its_line(ws):
    """`mint runs ls | grep` or a CI log: the id `--resume` needs is never split over lines, whatever the width."""
    from tests.conftest import run_mint

    names = [f"genui-sft-20261203-11490{i}-31337{i}" for i in range(3)]
    for name in names:
        (ws.home / "runs" / name).mkdir(parents=True)
        (ws.home / "runs" / name / "run.json").write_text(json.dumps({
            "run": name, "specialist": "genui", "method": "sft", "dataset": "prod@03353adc6834f00d",
            "base": "smollm2-135m"}))
    done = run_mint("runs", "ls", env={"COLUMNS": ""})
    assert done.returncode == 0, done.stderr
    for name in names:
        (line,) = [line for line in done.stdout.splitlines() if name in line]
        assert "prod@03353adc6834f00d" in line and "genui" in line


def test_runs_show_their_numbers_as_every_table_does(ws, capsys):
    """A large loss in thousands (never 1.235e+04), a learning rate in exponent notation (three decimals would round
    it away), the duration in seconds."""
    folder = ws.home / "runs" / "coding-sft-1"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run": folder.name, "specialist": "coding", "method": "sft"}))
    (folder / "metrics.jsonl").write_text(
        '{"event": "start", "step": 0, "max_steps": 2000, "time": 100}\n'
        '{"step": 1500, "loss": 12345.6, "learning_rate": 2e-05, "tokens_per_s": 523.7, "time": 141.4}\n')
    assert main(["runs", "ls"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if folder.name in line]
    assert "1,500/2,000" in row and "12,346" in row and "41s" in row and "e+" not in row
    assert main(["runs", "show", folder.name]) == 0
    (step,) = [line for line in capsys.readouterr().out.splitlines() if line.split()[:2] == ["│", "1500"]]
    assert step.split() == ["│", "1500", "│", "12,346", "│", "-", "│", "2.00e-05", "│", "524", "│"]
