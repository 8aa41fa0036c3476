"""What every command module shares: the Typer apps, the consoles, the workspace and JSON output."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Table

from mint import __version__
from mint.errors import BadInput
from mint.registry.report import Report

app = typer.Typer(help="mint: keep a deployed Mixture-of-LoRA model learning.", no_args_is_help=True,
                  add_completion=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})

def _help_layout() -> None:
    """--help as people copy from it: a line never breaks inside a hyphenated word (a file name such as
    my-requests.jsonl or an option such as --max-lora-rank split over two lines can be neither copied nor
    grepped), and an argument is named in capitals in the usage line and its list (``mint loop [OPTIONS]
    RECIPE``), as click names them, not ``{recipe}``."""
    from typer import core
    from typer._click import _textwrap

    class _Wrapper(_textwrap.TextWrapper):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "break_on_hyphens": False})

    _textwrap.TextWrapper = _Wrapper  # type: ignore[misc]  # click's wrap_text imports it when it wraps
    # typer's classes patched on purpose: mypy sees a method replaced
    display_name_raw = property(lambda arg: arg.metavar or arg.name.upper())
    core.TyperArgument.display_name_raw = display_name_raw  # type: ignore[method-assign,assignment]

    def usage_name(arg) -> str:
        name = arg.display_name_raw if arg.required else f"[{arg.display_name_raw}]"
        return name + ("..." if arg.nargs != 1 else "")

    core.TyperArgument._usage_display_name = usage_name  # type: ignore[method-assign,assignment]


_help_layout()

# piped into a file, grep or a CI log, a table takes its natural width: an id split over lines can be neither
# copied nor grepped (COLUMNS still sets a width)
PIPED_WIDTH = 10_000


class _Console(Console):
    """A rich console that respects NO_COLOR entirely (no colour, no bold: plain text) and lays tables out to
    the terminal's width on a terminal, and to their natural width when the output is not a terminal."""

    def __init__(self, **kwargs: Any) -> None:
        if os.environ.get("NO_COLOR"):
            kwargs["color_system"] = None     # rich's own NO_COLOR handling drops colours but keeps bold
        super().__init__(**kwargs)

    def _size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]  # rich's stub: a property
        if self._width is None and not self.is_terminal and not (self._environ.get("COLUMNS") or "").isdigit():
            return ConsoleDimensions(PIPED_WIDTH, size.height)
        return size

    size = property(_size, Console.size.fset)  # type: ignore[attr-defined]  # rich's stub: a property


# soft_wrap: a message is never broken into lines by rich (a path split across two lines of a CI log can be
# neither copied nor grepped)
out = _Console(soft_wrap=True)
err = _Console(stderr=True, soft_wrap=True)        # progress and warnings: silent under --quiet
problems = _Console(stderr=True, soft_wrap=True)   # errors: always said
JSON_OPT = typer.Option(False, "--json", help="Print one JSON object instead of tables.")
DEVICE_OPT = typer.Option("auto", "--device", envvar="MINT_DEVICE", show_default=True,
                          help="Where to train: auto (CUDA when torch sees it, else the CPU), cpu, cuda or cuda:N. "
                               "Decoding runs on the CPU.")
_state: dict[str, Any] = {"home": None, "registry": None, "config": None, "verbosity": 0}

NO_PROJECT = "no mint.yaml here: run `mint init`, or pass --config / --home"


class NoProject(BadInput):
    """A command that writes to the workspace ran where there is no project (exit 2): nothing was written."""


def sub_app(name: str, help: str) -> typer.Typer:
    """A command group (`mint data ...`) attached to the root app."""
    group = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


def in_project() -> bool:
    """A project is here: ./mint.yaml exists, or the command names its project file (--config, $MINT_CONFIG) or
    its workspace (--home, $MINT_HOME)."""
    return bool(_state["config"] or _state["home"]) or Path("mint.yaml").is_file()


def ws(*, writes: bool = False):
    """The workspace named by --home / $MINT_HOME, else ./.mint; its registry named by --registry /
    $MINT_REGISTRY_URL, else its SQLite file.

    A command that ``writes`` (ingest, train, eval, promote, loop, serve, ...) runs only in a project, so that
    nothing is made silently in a folder that is not one. A read-only command also reads a workspace that
    exists without a mint.yaml beside it, or a shared registry; without any, it says so (exit 2) and creates
    nothing."""
    from mint.registry.backend import check_url
    from mint.workspace import workspace

    if _state["registry"]:
        check_url(_state["registry"], field="--registry (or MINT_REGISTRY_URL)")
    chosen = workspace(_state["home"], registry_url=_state["registry"])
    if chosen.home.exists() and not chosen.home.is_dir():
        raise BadInput("is a file, not a workspace folder: point --home (or MINT_HOME) at a folder",
                       file=str(chosen.home), field="--home")
    # a read also needs no project where there is something to read: a workspace, or a shared registry
    if not in_project() and (writes or not (chosen.home.is_dir() or chosen.registry_url)):
        raise NoProject(NO_PROJECT)
    return chosen


def plain(value: Any) -> Any:
    """Dataclasses, paths and containers as JSON-ready values; a type with its own JSON shape (``to_dict``, as a
    report's gate has) is written in that shape."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if callable(to_dict := getattr(value, "to_dict", None)):
            return plain(to_dict())
        return {k: plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(plain(value), ensure_ascii=False, indent=2) + "\n")


def baseline_description(report: Report) -> str:
    """What a report was measured against, as `mint eval` and `mint report show` both say it."""
    baseline = report.baseline
    measured = baseline.label or ("base" if baseline.revision_id is None else baseline.revision_id)
    if baseline.report is None and report.source == "predictions":
        return measured + (" (no baseline: gates that compare with one fail; see --baseline-predictions)"
                           if measured == "none" else " (scored from the file)")
    if baseline.revision_id is None:
        return f"{measured} (generation 0: the bare base under this contract)"
    return measured


def report_table(report: Report) -> Table:
    """A report's metrics and gates (mint.reporting.tables.gate_rows): what `mint eval` and `mint report show`
    print."""
    from mint.cli.tables import rich_table
    from mint.reporting.tables import GATE_COLUMNS, gate_rows

    return rich_table(f"{report.label} under {report.contract.name} v{report.contract.version}", GATE_COLUMNS,
                      gate_rows(report))


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``1,024 episodes``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def choose_device(device: str, role: str, json_out: bool = False, *, say: bool = True) -> None:
    """Make ``device`` this command's (mint.hardware.select_device: MINT_DEVICE, read by mint.hardware.detect) and,
    unless --json or --quiet (or ``say`` is False: the command says it later, ``say_device``), say on stderr where
    it will train and decode, and at what precision (``role``: train, decode or both). CUDA asked for where there
    is none is exit 2, before anything runs. Outside a project it says nothing: the command is refused there
    (exit 2) before it would run anything."""
    from mint.hardware import requested_device, select_device, training_device

    select_device(device)
    if requested_device() == "cuda":     # only then is torch worth importing before the command's own checks
        training_device()
    if say:
        say_device(role, json_out)


def say_device(role: str, json_out: bool = False) -> None:
    """The device line of ``choose_device``, for a command that says it once its own checks have passed (a mistake
    is answered before torch is imported)."""
    from mint.hardware import device_line, training_device

    training_device()
    if not json_out and not quiet() and in_project():
        err.print(device_line(role), highlight=False, markup=False)


def after_checks(role: str, json_out: bool = False) -> Callable[[], None]:
    """What a command that loads a model does once its request has passed its checks, at most once however often
    the returned function is called: say the device line (``say_device``) and quiet transformers' own output
    (``quiet_transformers``). Both import torch or transformers, which takes seconds, so a mistake said before
    them is answered at once, and without a device line for a run that never starts."""
    done: list[bool] = []

    def checked() -> None:
        if not done:
            done.append(True)
            say_device(role, json_out)
            quiet_transformers()
    return checked


def verbose() -> bool:
    return _state["verbosity"] > 0


def quiet() -> bool:
    return _state["verbosity"] < 0


def quiet_transformers() -> None:
    """Silence transformers', TRL's and datasets' own warnings and progress bars (mint says what matters);
    --verbose keeps them."""
    import warnings

    if verbose():
        return
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="trl")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    quiet_datasets()


def quiet_datasets() -> None:
    """datasets' progress bars ("Saving the dataset ...") off, unless --verbose."""
    if verbose():
        return
    from datasets.utils import logging as ds_logging

    ds_logging.set_verbosity_error()
    ds_logging.disable_progress_bar()


class ProgressLines:
    """Progress of a long command: a bar with ETA on a terminal; when stderr is not one (cron, CI, a pipe),
    a plain line at most every ``every_s`` seconds and at the end of each task, so a log never sits silent for
    minutes. Nothing under --json or --quiet."""

    def __init__(self, enabled: bool = True, every_s: float = 10.0) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.enabled = enabled and not quiet()
        self.live = self.enabled and err.is_terminal
        self.every_s = every_s
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
                            TimeRemainingColumn(), console=err, transient=True, disable=not self.live)
        self.tasks: dict[str, Any] = {}
        self.said: dict[str, float] = {}
        self.started: dict[str, float] = {}

    def __enter__(self) -> "ProgressLines":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def update(self, label: str, done: int, total: int | None, share: float | None = None) -> None:
        """``done`` of ``total``; ``share``, where given, is the share of the work done that the ETA follows instead
        (a decoding stream's token budget: its rows finish together near the end, so ``done`` lags the time)."""
        if not self.enabled:
            return
        now = time.monotonic()
        count = f"{done}/{total if total is not None else '?'}"
        if label not in self.tasks:
            self.tasks[label] = self.bar.add_task(label, total=total if share is None else 1.0, count=count)
            self.started[label] = now
        finished = total is not None and done >= total
        if share is None:
            self.bar.update(self.tasks[label], completed=done, total=total, count=count)
        else:
            self.bar.update(self.tasks[label], completed=1.0 if finished else share, total=1.0, count=count)
        if self.live:
            return
        if finished or now - self.said.get(label, self.started[label]) >= self.every_s or (done == 0 and
                                                                                           label not in self.said):
            self.said[label] = now
            elapsed = now - self.started[label]
            left = remaining_seconds(elapsed, done, total, share) if not finished else None
            eta = f"  ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}" if left is not None else ""
            err.print(f"{label}: {count}" + (f" in {elapsed:.0f}s" if finished else eta), highlight=False,
                      markup=False)


def remaining_seconds(elapsed: float, done: int, total: int | None, share: float | None = None) -> int | None:
    """The seconds left at the pace so far: by ``share`` of the work where given, else by ``done`` of ``total``;
    None before anything is done."""
    fraction = share if share is not None else (done / total if total else None)
    if not fraction or fraction <= 0 or fraction >= 1:
        return None
    return int(elapsed / fraction * (1 - fraction))


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mint {__version__}")
        raise typer.Exit()


def set_verbosity(ctx: typer.Context, param: typer.CallbackParam, value: bool) -> None:
    """-q / -v, on the root and on every command: set only when given, so a command's default does not undo
    the root's."""
    if value:
        _state["verbosity"] = -1 if param.name == "quiet" else 1
        err.quiet = param.name == "quiet"


def reset_state() -> None:
    """Each invocation starts from the defaults (tests call the CLI many times in one process)."""
    _state.update(home=None, registry=None, config=None, verbosity=0)
    err.quiet = False


@app.callback()
def _root(
    home: Optional[Path] = typer.Option(None, "--home", envvar="MINT_HOME",
                                        help="Workspace folder (default ./.mint)."),
    config: Optional[Path] = typer.Option(None, "--config", envvar="MINT_CONFIG",
                                          help="The project file (default ./mint.yaml)."),
    registry: Optional[str] = typer.Option(None, "--registry", envvar="MINT_REGISTRY_URL",
                                           help="A shared registry, postgresql://USER@HOST:PORT/DB (default: the "
                                                "workspace's SQLite file)."),
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
    track: bool = typer.Option(False, "--track",
                               help="Log training runs and evaluation reports to MLflow and TensorBoard, as "
                                    "mint.yaml's `tracking:` block does (where it says nothing)."),
) -> None:
    _state["home"] = home
    if track:   # the library (and the processes it starts) read it from here, for this invocation
        os.environ["MINT_TRACK"] = "1"
    _state["registry"] = registry
    _state["config"] = config
    if config is not None:   # the library (and the processes it starts) read the project file from here
        os.environ["MINT_CONFIG"] = str(config.absolute())
