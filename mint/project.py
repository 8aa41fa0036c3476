"""The project file ``mint.yaml``: the base, the specialists and their routing keywords.

``mint init`` writes it; ``mint ingest`` reads the keywords to label episodes
that carry no specialist of their own.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mint.errors import BadInput
from mint.text import closest
from mint.tracking import TRACKING_KEYS, Tracking
from mint.yamlfile import check_keys, check_number, check_string, load_yaml

PROJECT_FILE = "mint.yaml"
CONFIG_ENV = "MINT_CONFIG"          # the project file, when it is not ./mint.yaml (`mint --config FILE`)
PROJECT_KEYS = ("base", "fallback", "specialists", "monitor", "traffic", "tracking", "engine")
ENGINE_KEYS = ("url", "api_key_env", "timeout_s")
LOCAL_ENGINE = "local"             # mint's own engine (mint.generation), the default
TRAFFIC_KEYS = ("heldout",)
TRAINING_KEYS = {"lora", "trl", "rewards", "examples"}   # the blocks of `mint train --train-config FILE`
GENERATOR, ROUTER_KIND = "generator", "router"
KINDS = (GENERATOR, ROUTER_KIND)    # what a specialist is (mint.kinds says how each is trained and scored)
DEFAULT_ROUTER = "router"           # the router's name in a mint.yaml that declares none
ROUTER_DESCRIPTION = "picks the specialist of each user turn: rules, then a probe on the base"
MONITOR_DEFAULTS = (("share_shift", 0.15), ("max_share", 0.8))
NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}\Z")


@dataclass(frozen=True)
class SpecialistEntry:
    """A generator specialist as mint.yaml declares it: its name, what it is for, how turns reach it (keywords,
    tool use, rules) and its harness: the registered mint.harness.Specialist that scores, verifies and rewards
    its answers (``harness:``, by default the one of its own name), so a project may call its coding specialist
    ``code``. Its kind is the project's (``Project.kind_of``): a router is no entry."""
    name: str
    description: str
    keywords: tuple[str, ...]
    tool_use: bool = False     # episodes with tool calls or tool definitions go to this specialist
    patterns: tuple[str, ...] = ()   # regexes (any case) that send a turn here outright (the router's rules)
    harness: str | None = None  # None: the harness of its own name
    # where mint.yaml names the harness (file, line, field), for the error when no registered harness has the name
    harness_at: tuple = field(default=(None, None, None), compare=False)

    @property
    def harness_name(self) -> str:
        return self.harness or self.name


@dataclass(frozen=True)
class ServedEngine:
    """``engine: {url, api_key_env, timeout_s}``: an OpenAI-compatible server that loads LoRA adapters at runtime
    (vLLM), where contracts are decoded instead of mint's own engine. ``at``: where it was named (file, line)."""
    url: str
    api_key_env: str | None = None
    timeout_s: float = 60.0
    at: tuple = (None, None)

    @property
    def field(self) -> str:
        return "engine.url" if self.at[0] else "--engine"


@dataclass(frozen=True)
class Project:
    base: str
    specialists: tuple[SpecialistEntry, ...]
    path: Path | None = None
    monitor: tuple[tuple[str, float], ...] = MONITOR_DEFAULTS   # `mint monitor` thresholds
    router: str = DEFAULT_ROUTER     # the specialist of kind `router`: it picks among ``specialists``
    router_description: str = ROUTER_DESCRIPTION
    fallback_name: str | None = None   # `fallback:` in mint.yaml (None: the first specialist)
    # `traffic: {heldout: S}`: the share of served requests held out for contract suites (mint.data.split; None:
    # the traffic's own, or the dataset share for a new one), and where it is written (file, line, field), for errors
    traffic_heldout: float | None = None
    traffic_at: tuple = (None, None, "traffic.heldout")
    tracking: Tracking = Tracking()   # `tracking:`: MLflow and TensorBoard (mint.tracking); off without it
    engine: ServedEngine | None = None   # `engine:` where contracts are decoded (None: `local`, mint's own)

    @property
    def fallback(self) -> str:
        """The specialist of an ingested episode that no rule labels, where no router champion places it: the
        one mint.yaml names under ``fallback``, else the first (chat in the default project)."""
        return self.fallback_name or self.specialists[0].name

    @property
    def names(self) -> tuple[str, ...]:
        """The generators, which the router picks from."""
        return tuple(s.name for s in self.specialists)

    @property
    def all_names(self) -> tuple[str, ...]:
        """Every specialist that trains and is promoted: the generators, then the router."""
        return (*self.names, self.router)

    def kind_of(self, name: str) -> str:
        """``name``'s kind (GENERATOR or ROUTER_KIND); a name mint.yaml does not define is a generator, whose
        training then says it is unknown."""
        return ROUTER_KIND if name == self.router else GENERATOR

    @property
    def tool_specialist(self) -> str | None:
        """The specialist marked ``tool_use: true`` (the first, if several are), else None."""
        return next((s.name for s in self.specialists if s.tool_use), None)

    def harness_of(self, name: str) -> str:
        """The harness of the specialist ``name`` (a registered mint.harness.Specialist's name): the one mint.yaml
        names for it, else the one of its own name (as for a name mint.yaml does not declare, or the router)."""
        return next((s.harness_name for s in self.specialists if s.name == name), name)

    def specialist_with_harness(self, harness: str) -> str | None:
        """The project's generator whose harness is ``harness`` (the first, if several are), else None: what a
        kind of request (a coding task, a tool call) is labelled with in this project, whatever it is called."""
        return next((s.name for s in self.specialists if s.harness_name == harness), None)


DEFAULT_SPECIALISTS = (
    SpecialistEntry("chat", "open conversation, advice, explanations", (
        "hello", "hi", "thanks", "thank you", "how are you", "opinion", "advice", "recommend",
        "story", "poem", "joke", "explain", "meaning of", "tell me about", "what do you think",
    )),
    SpecialistEntry("agent", "tool use: the model calls functions to act for the user", (
        "book", "schedule", "calendar", "meeting", "reminder", "order", "refund", "weather",
        "forecast", "flight", "hotel", "send an email", "look up", "search for", "convert",
        "exchange rate", "stock price", "call the", "use the tool",
    ), tool_use=True, patterns=(
        # acting for the user in the world: reminders, bookings, messages, live data, devices
        r"\b(remind(er)?s? me|set (an? |my )?(alarm|timer|reminder)|wake me up)\b",
        r"\b(book|reserve|cancel|reschedule|order) (me |us |my )?(a |an |the )?(table|flight|hotel|room|taxi|cab|"
        r"ride|car|rental|seat|ticket|appointment|meeting|reservation|pizza|delivery)s?\b",
        r"\b(weather|forecast)\b|\bgoing to (rain|snow)\b",
        r"\bsend an? (email|text|message)\b|\b(text|email|message) \w+ (that|saying)\b",
        r"\b(exchange rate|stock price|share price|price of (bitcoin|gold|oil))\b|\bhow (much|many) \w+ is [\d.,]+",
        r"\b(my (calendar|schedule|inbox|shopping list|notes|package|bill)|where'?s my)\b",
        r"\b(turn (on|off) the|play (some|me)|track my|look (it |this |that )?up|find me an?|get me an?)\b",
        r"\bflights? (from|to)\b|\b(cheapest|next|my) flight\b|\b(hotels?|taxi|uber|train to|directions to)\b",
    )),
    SpecialistEntry("coding", "writing, fixing and explaining code", (
        "python", "javascript", "typescript", "rust", "java", "sql", "regex", "function",
        "code", "bug", "debug", "compile", "exception", "traceback", "stack trace", "def",
        "class", "algorithm", "unit test", "implement", "refactor", "script", "return",
    ), patterns=(
        # code itself, an error message, or the vocabulary of programming
        r"```|\bdef \w+\(|\w+\.\w+\(|\bimport \w+",
        r"\b\w*(Error|Exception)\b|\b(traceback|stack ?trace|seg ?fault|null pointer|syntax error|undefined is not)\b",
        r"\b(python|javascript|js|typescript|java|c\+\+|c#|rust|golang|sql|regex|bash|node|pip|npm|git|html|css|"
        r"json|csv|api)\b",
        r"\b(code|coding|script|program|function|method|variable|array|loop|recursion|compiler?|debug|bug|"
        r"unit tests?|my tests|query|dictionar(y|ies)|list comprehension|string|integer)s?\b",
    )),
    SpecialistEntry("genui", "answers as a UI4A JSON component tree that a client renders", (
        "ui", "form", "button", "card", "component", "layout", "dashboard", "widget",
        "screen", "page", "table view", "text field", "dropdown", "select", "chart",
        "render", "mockup", "interface",
    ), patterns=(
        # a screen, its widgets, or data shown as a chart or a table
        r"\b(page|screen|form|button|dashboard|widget|card|layout|lay out|mock ?up|wireframe|dropdown|slider|toggle|"
        r"tabs|banner|modal|navbar|sidebar|checkbox|search bar|progress bar|text field|input field)s?\b",
        r"\b(bar|line|pie) (chart|graph)s?\b|\bas an? (chart|graph|table|list|grid)\b|"
        r"\b(show|display|render|make|create) (me )?(a |an |the )?(table|grid|list) of\b",
    )),
)

DEFAULT_PROJECT = Project(base="smollm2-135m", specialists=DEFAULT_SPECIALISTS)


def render_project_yaml(project: Project = DEFAULT_PROJECT) -> str:
    out = [
        "# mint project file: the base model and the specialists the router picks from.",
        "# `mint ingest` labels an episode that has no specialist of its own with the",
        "# specialist marked `tool_use: true` when it calls tools or defines them, else with the",
        "# specialist whose keywords its user turns mention most (whole words, any case; one",
        "# one-word keyword alone is too common to decide). An episode that matches none goes to",
        "# the router champion when there is one, else to the `fallback` specialist.",
        "# The router sends a turn outright to the one specialist whose `patterns` (regexes, any case)",
        "# it matches; a turn that matches none, or those of two specialists, goes to the learned probe.",
        "# Each specialist has a `kind`: `generator` (the default: a LoRA adapter that answers) or",
        "# `router` (the one that picks among the generators; without one, it is named `router`).",
        "# A generator's `harness` scores, verifies and rewards its answers: one of mint's registered",
        "# specialists (chat, agent, coding, genui, or one you add), by default the one of its own name,",
        "# so a specialist renamed (`code:`) keeps its behaviour with `harness: coding`.",
        f"base: {project.base}",
        f"fallback: {project.fallback}",
        "specialists:",
    ]
    for s in project.specialists:
        out.append(f"  {s.name}:")
        out.append(f"    description: {_yaml_str(s.description)}")
        if s.harness:
            out.append(f"    harness: {s.harness}")
        if s.tool_use:
            out.append("    tool_use: true")
        out.append("    keywords: [" + ", ".join(_yaml_str(k) for k in s.keywords) + "]")
        if s.patterns:
            out.append("    patterns:")
            out.extend(f"      - {_yaml_str(p)}" for p in s.patterns)
    out.append(f"  {project.router}:")
    out.append(f"    kind: {ROUTER_KIND}")
    out.append(f"    description: {_yaml_str(project.router_description)}")
    return "\n".join(out) + "\n"


def _yaml_str(value: str) -> str:
    # always quoted: a bare `no` or `on` would load as a boolean
    return json.dumps(value, ensure_ascii=False)


def project_path() -> Path:
    """The project file: ``$MINT_CONFIG`` (what ``mint --config`` sets), else ``./mint.yaml``."""
    return Path(os.environ.get(CONFIG_ENV) or PROJECT_FILE)


def load_project(path: Path | None = None) -> Project:
    """Read ``path`` (default: ``$MINT_CONFIG``, else ``./mint.yaml``); with no file, the default project."""
    if path is None:
        path = project_path()
        if not path.exists() and not os.environ.get(CONFIG_ENV):
            return DEFAULT_PROJECT
    doc = load_yaml(path)
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error("", "expected a mapping with `base` and `specialists`")
    unknown = set(data) - set(PROJECT_KEYS)
    if unknown and unknown <= TRAINING_KEYS:
        raise doc.error(str(sorted(unknown, key=str)[0]), "this is a training settings file, not a project file: "
                        "pass it to `mint train --train-config FILE` (--config names the project's mint.yaml)")
    check_keys(doc, data, "", PROJECT_KEYS)
    monitor = dict(MONITOR_DEFAULTS)
    for key, value in check_keys(doc, data.get("monitor") or {}, "monitor", tuple(monitor)).items():
        monitor[key] = float(check_number(doc, value, f"monitor.{key}", minimum=0, maximum=1))
    base = check_string(doc, data.get("base", DEFAULT_PROJECT.base), "base")
    raw = data.get("specialists")
    if not isinstance(raw, dict) or not raw:
        raise doc.error("specialists", "expected a mapping of specialist names to {description, keywords}")
    routers: list
    specialists, routers = [], []
    for name, spec in raw.items():
        where = f"specialists.{name}"
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise doc.error(where, "a specialist name is lowercase letters, digits, - or _, starting with a letter")
        spec = spec or {}
        if not isinstance(spec, dict):
            raise doc.error(where, "expected a mapping with description and keywords")
        # an older mint.yaml names no kind: an entry in the router's default slot is the router
        kind = spec.get("kind", ROUTER_KIND if name == DEFAULT_ROUTER else GENERATOR)
        if kind not in KINDS:
            raise doc.error(f"{where}.kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
        check_keys(doc, spec, where, ("kind", "description") if kind == ROUTER_KIND else
                   ("kind", "description", "keywords", "tool_use", "patterns", "harness"))
        description = spec.get("description", "")
        if not isinstance(description, str):
            raise doc.error(f"{where}.description", "expected a string")
        if kind == ROUTER_KIND:
            if routers:
                raise doc.error(f"{where}.kind", f"a project has one router; {routers[0][0]} is one already")
            routers.append((name, description or ROUTER_DESCRIPTION))
            continue
        patterns = spec.get("patterns", [])
        if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
            raise doc.error(f"{where}.patterns", "expected a list of regular expressions")
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise doc.error(f"{where}.patterns", f"[{index}] {pattern!r} is not a regular expression: {exc}")
        tool_use = spec.get("tool_use", False)
        if not isinstance(tool_use, bool):
            raise doc.error(f"{where}.tool_use", "expected true or false")
        keywords = spec.get("keywords", [])
        if not isinstance(keywords, list) or not all(isinstance(k, str) and k.strip() for k in keywords):
            raise doc.error(f"{where}.keywords", "expected a list of non-empty strings")
        harness = check_string(doc, spec["harness"], f"{where}.harness") if "harness" in spec else None
        specialists.append(SpecialistEntry(name, description, tuple(k.strip().lower() for k in keywords), tool_use,
                                      tuple(patterns), harness,
                                      (str(path), doc.line(f"{where}.harness"), f"{where}.harness")))
    if not specialists:
        raise doc.error("specialists", "expected at least one specialist of kind generator")
    router, router_description = routers[0] if routers else (DEFAULT_ROUTER, ROUTER_DESCRIPTION)
    fallback = data.get("fallback")
    names = [s.name for s in specialists]
    if fallback is not None and fallback not in names:
        raise doc.error("fallback", f"{fallback!r} is not a generator specialist of this file"
                        + closest(fallback, names, listing="expected one of"))
    traffic = check_keys(doc, data.get("traffic") or {}, "traffic", TRAFFIC_KEYS)
    heldout = None
    if "heldout" in traffic:
        heldout = check_number(doc, traffic["heldout"], "traffic.heldout", minimum=0, maximum=1)
        if not 0 < heldout < 1:
            raise doc.error("traffic.heldout", "expected the share of served requests held out, between 0 and 1")
    return Project(base=base, specialists=tuple(specialists), path=path, monitor=tuple(monitor.items()),
                   router=router, router_description=router_description, fallback_name=fallback,
                   traffic_heldout=heldout, traffic_at=(str(path), doc.line("traffic.heldout"), "traffic.heldout"),
                   tracking=_tracking(doc, data.get("tracking")), engine=_engine(doc, data.get("engine", LOCAL_ENGINE)))


def _engine(doc, value) -> ServedEngine | None:
    """mint.yaml's ``engine: local`` (None) or ``{url: http://HOST:PORT/v1, api_key_env: NAME, timeout_s: S}``."""
    if value == LOCAL_ENGINE:
        return None
    if not isinstance(value, dict):
        raise doc.error("engine", f"expected `{LOCAL_ENGINE}` or a mapping with `url` (an OpenAI-compatible server)")
    block = check_keys(doc, value, "engine", ENGINE_KEYS)
    url = check_string(doc, block.get("url"), "engine.url")
    if not re.match(r"^https?://[^/\s]+", url):
        raise doc.error("engine.url", f"{url!r} is not an http(s) URL")
    key = block.get("api_key_env")
    if key is not None:
        check_string(doc, key, "engine.api_key_env")
    timeout = float(check_number(doc, block.get("timeout_s", 60.0), "engine.timeout_s", minimum=0, exclusive=True))
    return ServedEngine(url, key, timeout, at=(str(doc.path), doc.line("engine.url")))


def _tracking(doc, block) -> Tracking:
    """mint.yaml's ``tracking: {mlflow: true | URI, tensorboard: true, experiment: NAME}``."""
    block = check_keys(doc, block or {}, "tracking", TRACKING_KEYS)
    mlflow, tensorboard = block.get("mlflow", False), block.get("tensorboard", False)
    if not isinstance(mlflow, bool) and not (isinstance(mlflow, str) and mlflow.strip()):
        raise doc.error("tracking.mlflow", "expected true, false or a tracking URI (sqlite:///mlflow.db, http://...)")
    if not isinstance(tensorboard, bool):
        raise doc.error("tracking.tensorboard", "expected true or false")
    experiment = check_string(doc, block.get("experiment", "mint"), "tracking.experiment")
    return Tracking(mlflow=bool(mlflow), uri=mlflow.strip() if isinstance(mlflow, str) else None,
                    tensorboard=tensorboard, experiment=experiment)


@dataclass(frozen=True)
class InitResult:
    directory: str
    created: list[str]
    kept: list[str]


SCAFFOLD = ("contracts", "recipes", "examples")   # shipped inside the package (mint/scaffold/)


def _scaffold_root() -> Path:
    return Path(__file__).resolve().parent / "scaffold"


def init_project(directory: Path) -> InitResult:
    """A working project: ``mint.yaml``, the default contracts with their suites and the UI4A catalog,
    the recipes and the example logs they read. Files that exist are kept, never overwritten."""
    if directory.exists() and not directory.is_dir():
        raise BadInput("exists and is not a directory", file=str(directory))
    directory.mkdir(parents=True, exist_ok=True)
    created: list[str]
    kept: list[str]
    created, kept = [], []
    root = _scaffold_root()
    for folder in SCAFFOLD:
        source = root / folder
        target = directory / folder
        existed = target.exists()
        new_files = 0
        for path in sorted(source.rglob("*")) if source.is_dir() else []:
            if "__pycache__" in path.parts or not path.is_file():
                continue
            destination = target / path.relative_to(source)
            if destination.exists():
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
            new_files += 1
        target.mkdir(exist_ok=True)
        (kept if existed and not new_files else created).append(f"{folder}/")
    project_file = directory / PROJECT_FILE
    try:
        with open(project_file, "x", encoding="utf-8") as f:   # "x": never overwrite
            f.write(render_project_yaml())
        created.append(PROJECT_FILE)
    except FileExistsError:
        kept.append(PROJECT_FILE)
    return InitResult(directory=str(directory), created=created, kept=kept)
