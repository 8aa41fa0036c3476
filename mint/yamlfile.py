"""Safe YAML loading that remembers where each value came from, and the field checks every config file
(mint.yaml, contracts, recipes) makes with it.

Config errors must name ``file:line: field``; PyYAML's safe loader drops the
marks, so the document is composed once more to map each field path
(``specialists.coding.keywords``) to its line.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mint.errors import BadInput
from mint.text import closest


@dataclass
class YamlDoc:
    path: Path
    data: Any
    lines: dict[str, int] = field(default_factory=dict)

    def line(self, dotted: str) -> int | None:
        """The line of ``dotted``, or of its nearest parent that has one."""
        while dotted:
            if dotted in self.lines:
                return self.lines[dotted]
            dotted = dotted.rpartition(".")[0]
        return self.lines.get("", 1)

    def error(self, dotted: str, message: str) -> BadInput:
        return BadInput(message, file=str(self.path), line=self.line(dotted), field=dotted or None)


def check_keys(doc: YamlDoc, value, where: str, allowed) -> dict:
    """``value`` when it is a mapping whose keys are all ``allowed``; else BadInput at the field, with the
    nearest allowed key (or all of them)."""
    if not isinstance(value, dict):
        raise doc.error(where, "expected a mapping")
    for key in value:
        if key not in allowed:
            raise doc.error(f"{where}.{key}" if where else str(key),
                            "unknown key" + closest(key, allowed, listing="expected one of"))
    return value


def check_number(doc: YamlDoc, value, where: str, *, minimum=None, maximum=None, integer: bool = False,
                 exclusive: bool = False):
    """``value`` when it is a number (an integer with ``integer``) at least ``minimum`` (more than it with
    ``exclusive``) and at most ``maximum``; else BadInput at the field."""
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool):
        raise doc.error(where, f"expected {'an integer' if integer else 'a number'}, got {type(value).__name__}")
    if minimum is not None and (value <= minimum if exclusive else value < minimum):
        raise doc.error(where, f"must be {'greater than' if exclusive else 'at least'} {minimum}")
    if maximum is not None and value > maximum:
        raise doc.error(where, f"must be at most {maximum}")
    return value


def check_string(doc: YamlDoc, value, where: str) -> str:
    """``value`` when it is a non-empty string; else BadInput at the field."""
    if not isinstance(value, str) or not value.strip():
        raise doc.error(where, "expected a non-empty string")
    return value


def _index(node: yaml.Node, prefix: str, lines: dict[str, int], seen: set[int], ancestors: set[int]) -> None:
    """Map each field path under ``node`` to its line. An aliased node is indexed once, at its anchor: walking
    every alias would take exponential time on nested aliases (a "billion laughs" file)."""
    if id(node) in ancestors:
        raise _SelfAlias()
    lines.setdefault(prefix, node.start_mark.line + 1)
    if id(node) in seen:
        return
    seen.add(id(node))
    ancestors.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = f"{prefix}.{key.value}" if prefix else str(key.value)
            lines[name] = key.start_mark.line + 1
            _index(value, name, lines, seen, ancestors)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, f"{prefix}[{i}]", lines, seen, ancestors)
    ancestors.discard(id(node))


class _SelfAlias(Exception):
    """An alias inside its own anchor (``a: &a [*a]``): data with no end."""


MAX_FLOW_DEPTH = 100
_BRACKETS = re.compile(r"[\[\]{}]")


def _flow_depth(text: str) -> int:
    """How deep ``[``/``{`` nest, counting brackets inside quoted text too (an upper bound that real
    configs stay far below)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        depth = depth + 1 if match.group() in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


def load_yaml(path: Path) -> YamlDoc:
    """Load ``path`` with the safe loader; a syntax error is BadInput at its line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput("no such file", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read: {exc}", file=str(path)) from None
    depth = _flow_depth(text)
    if depth > MAX_FLOW_DEPTH:   # PyYAML takes seconds to fail on thousands of nested brackets
        raise BadInput(f"invalid YAML: brackets nested {depth} deep (at most {MAX_FLOW_DEPTH})", file=str(path))
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise BadInput(f"invalid YAML: {exc.problem or exc}", file=str(path),
                       line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise BadInput(f"invalid YAML: {exc}", file=str(path)) from None
    except RecursionError:   # PyYAML's parser recurses once per level of nesting
        raise BadInput("invalid YAML: nested too deeply to read", file=str(path)) from None
    lines: dict[str, int] = {}
    if node is not None:
        try:
            _index(node, "", lines, set(), set())
        except _SelfAlias:
            raise BadInput("invalid YAML: an alias refers to itself", file=str(path)) from None
        except RecursionError:
            raise BadInput("invalid YAML: nested too deeply to read", file=str(path)) from None
    return YamlDoc(path=path, data=data, lines=lines)


def is_file(path: Path) -> bool:
    """Whether a path a config file names is a file; False, not OSError, for a name too long for the OS."""
    try:
        return path.is_file()
    except OSError:
        return False


def exists(path: Path) -> bool:
    """Whether a path a config file names exists; False, not OSError, for a name too long for the OS."""
    try:
        return path.exists()
    except OSError:
        return False


# --- typed settings ---------------------------------------------------------------------------------
# A block of settings is declared once, as a frozen dataclass whose fields are made with ``setting``: its default,
# what it means and its bounds. ``check_settings`` reads a YAML mapping into it, every error at file:line: field.

def setting(default, what: str, *, minimum=None, maximum=None, exclusive: bool = False):
    """A field of a settings model: its ``default``, ``what`` it decides (said in the plan and the docs) and, for a
    number, its bounds. A field whose type admits None is turned off by ``off``, ``false`` or ``null``; a block
    (a nested model) by the same, and turned on with its defaults by ``on`` or ``true``."""
    return field(default=default, metadata={"what": what, "minimum": minimum, "maximum": maximum,
                                            "exclusive": exclusive})


def _alternatives(kind) -> tuple:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return tuple(a for arg in typing.get_args(kind) for a in _alternatives(arg))
    return (kind,)


def _expected(alternatives: tuple, meta: dict) -> str:
    said = []
    for kind in alternatives:
        if kind is bool:
            said.append("true or false")
        elif kind in (int, float):
            bounds = [f"{'greater than' if meta.get('exclusive') else 'at least'} {meta['minimum']}"
                      if meta.get("minimum") is not None else "",
                      f"at most {meta['maximum']}" if meta.get("maximum") is not None else ""]
            said.append(f"{'an integer' if kind is int else 'a number'} {' and '.join(b for b in bounds if b)}".strip())
        elif typing.get_origin(kind) is typing.Literal:
            said.append(", ".join(map(str, typing.get_args(kind))))
        elif dataclasses.is_dataclass(kind):
            said.append(f"a mapping of {', '.join(f.name for f in dataclasses.fields(kind))}, or on")
        elif kind is type(None):
            said.append("off")
    return "expected " + ", or ".join(said)


def _setting_value(doc: YamlDoc, value, kind, meta: dict, where: str):
    alternatives = _alternatives(kind)
    can_be_off = type(None) in alternatives
    if value is None or (value is False and can_be_off and bool not in alternatives):
        if can_be_off:
            return None
        raise doc.error(where, _expected(alternatives, meta))
    for alternative in alternatives:
        if isinstance(alternative, type) and dataclasses.is_dataclass(alternative):
            if value is True:
                return alternative()
            if isinstance(value, dict):
                return check_settings(doc, alternative, value, where)
        elif alternative is bool and isinstance(value, bool):
            return value
        elif alternative in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = check_number(doc, value, where, minimum=meta.get("minimum"), maximum=meta.get("maximum"),
                                  integer=alternative is int, exclusive=meta.get("exclusive", False))
            return float(number) if alternative is float else number
        elif typing.get_origin(alternative) is typing.Literal and isinstance(value, str) \
                and value in typing.get_args(alternative):
            return value
    choices = [str(c) for a in alternatives if typing.get_origin(a) is typing.Literal for c in typing.get_args(a)]
    hint = closest(value, choices) if isinstance(value, str) and choices else ""
    raise doc.error(where, _expected(alternatives, meta) + (f", got {value!r}" if not hint else "") + hint)


def check_settings(doc: YamlDoc, model: type, value, where: str):
    """``value``, a YAML mapping, as an instance of the settings ``model`` (a frozen dataclass of ``setting``
    fields); a key the model lacks, or a value outside its type and bounds, is BadInput at ``where.KEY`` (with the
    closest key)."""
    fields = {f.name: f for f in dataclasses.fields(model)}
    given = check_keys(doc, value if value is not None else {}, where, tuple(fields))
    types = typing.get_type_hints(model)
    return model(**{name: _setting_value(doc, raw, types[name], dict(fields[name].metadata),
                                         f"{where}.{name}" if where else name) for name, raw in given.items()})


def settings_dict(settings) -> dict:
    """A settings model as plain data (a block turned off is None), as a recipe would write it."""
    return dataclasses.asdict(settings)


def setting_names(model: type) -> tuple[str, ...]:
    """The keys a settings model takes."""
    return tuple(f.name for f in dataclasses.fields(model))


@dataclass(frozen=True)
class SettingLine:
    """One setting of a model as a plan shows it: its dotted path, its value as a recipe writes it, what it
    decides, and whether it is turned off."""
    path: str
    value: Any
    what: str
    off: bool = False


def setting_lines(settings, prefix: str = "") -> list[SettingLine]:
    """Every setting of ``settings`` (a settings model), nested blocks walked; a block turned off is one line."""
    lines = []
    for f in dataclasses.fields(settings):
        value, path, what = getattr(settings, f.name), f"{prefix}{f.name}", f.metadata.get("what", "")
        if dataclasses.is_dataclass(value):
            lines += setting_lines(value, f"{path}.")
        else:
            lines.append(SettingLine(path, value, what, off=value is None))
    return lines
