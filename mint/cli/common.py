"""What every command module shares: the Typer apps, the consoles, the workspace and JSON output."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from mint import __version__

app = typer.Typer(help="mint: keep a deployed Mixture-of-LoRA model learning.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})
# soft_wrap: a message is never broken into lines by rich (a path split across two lines of a CI log can be
# neither copied nor grepped); tables are still laid out to the console's width
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
JSON_OPT = typer.Option(False, "--json", help="Print one JSON object instead of tables.")
_state: dict[str, Any] = {"home": None, "registry": None}


def sub_app(name: str, help: str) -> typer.Typer:
    """A command group (`mint data ...`) attached to the root app."""
    group = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


def ws():
    """The workspace named by --home / $MINT_HOME, else ./.mint; its registry named by --registry /
    $MINT_REGISTRY_URL, else its SQLite file."""
    from mint.registry.backend import check_url
    from mint.workspace import workspace

    if _state["registry"]:
        check_url(_state["registry"], field="--registry (or MINT_REGISTRY_URL)")
    return workspace(_state["home"], registry_url=_state["registry"])


def plain(value: Any) -> Any:
    """Dataclasses, paths and containers as JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
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


def quiet_transformers() -> None:
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="trl")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mint {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    home: Optional[Path] = typer.Option(None, "--home", envvar="MINT_HOME",
                                        help="Workspace folder (default ./.mint)."),
    registry: Optional[str] = typer.Option(None, "--registry", envvar="MINT_REGISTRY_URL",
                                           help="A shared registry, postgresql://USER@HOST:PORT/DB (default: the "
                                                "workspace's SQLite file)."),
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    _state["home"] = home
    _state["registry"] = registry
