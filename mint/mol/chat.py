"""Chat with the mixture: one turn, or a session that keeps the conversation and takes feedback commands.

The routed specialist's champion answers (the bare base while a specialist has none). A session's turn is
logged as an episode when it is answered; the feedback it gets is logged when the next turn starts or the
session ends.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from mint.base import check_base_name
from mint.errors import BadInput, MintError
from mint.mol.mixture import Answer, Mixture, Turn
from mint.mol.runtime import Decoding
from mint.project import Project
from mint.render import conversation
from mint.text import check_unicode, closest
from mint.workspace import Workspace, workspace


@dataclass
class ChatReply:
    base: str
    specialist: str
    served_by: str
    decided_by: str
    probabilities: dict
    prompt: str
    reply: str
    new_tokens: int
    seconds: float
    load_seconds: float


def _reply(mixture: Mixture, prompt: str, answer: Answer) -> ChatReply:
    return ChatReply(mixture.runtime.loaded.name, answer.specialist, answer.served_by, answer.route.decided_by,
                     answer.route.probabilities, prompt, answer.text, answer.completion_tokens,
                     answer.latency_ms / 1000, mixture.runtime.loaded.seconds)


def read_tools(path: Path) -> list[dict]:
    """The tool definitions in ``path``: a JSON list of OpenAI tools (``{"type": "function", "function":
    {"name", "description", "parameters"}}``) or bare functions; BadInput naming the file, line and field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read it: {exc.strerror if isinstance(exc, OSError) else 'not UTF-8 text'}",
                       file=str(path)) from None
    try:
        tools = json.loads(text)
    except RecursionError:
        raise BadInput("not JSON this program can read: nested too deeply", file=str(path)) from None
    except ValueError as exc:
        raise BadInput(f"not JSON: {getattr(exc, 'msg', exc)}", file=str(path), line=getattr(exc, "lineno", None)) \
            from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not tools:
        raise BadInput("expected a JSON list of tool definitions", file=str(path))
    for i, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise BadInput('expected {"type": "function", "function": {"name": ..., "parameters": {...}}}',
                           file=str(path), field=f"[{i}].function.name")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise BadInput("expected a JSON schema object", file=str(path), field=f"[{i}].function.parameters")
    check_unicode(tools, "", file=str(path))
    return tools


def _check_prompt(prompt: str) -> None:
    if not prompt.strip():
        raise BadInput("the prompt is empty", field="PROMPT")
    check_unicode(prompt, "PROMPT")


def chat_turn(text: str, *, system: str | None = None, history: Sequence[dict] = (), tools: list[dict] | None = None,
              specialist: str | None = None, max_new_tokens: int = 64, session: str | None = None) -> Turn:
    """The turn ``mint chat`` sends for the user's ``text``: ``system`` (``--system``) leading the conversation so
    far; the tools stay beside it, listed when the turn is rendered (``mint.mol.mixture.prompt_of``)."""
    messages = conversation([*history, {"role": "user", "content": text}], system=system)
    return Turn(messages, list(tools or []), specialist=specialist, decoding=Decoding(max_new_tokens),
                session=session)


def chat_once(prompt: str, *, base: str | None = None, system: str | None = None, max_new_tokens: int = 64,
              specialist: str | None = None, ws: Workspace | None = None, project: Project | None = None,
              tools: list[dict] | None = None, started: Callable[[], None] | None = None) -> ChatReply:
    """Route ``prompt``, answer it greedily with the chosen specialist's champion, and log the turn; ``tools``
    (OpenAI tool definitions) are shown to the model and send the turn to the tool-use specialist. ``started`` is
    told once the request has passed its checks, before the base is loaded."""
    from mint.project import load_project

    _check_prompt(prompt)
    check_unicode(system, "--system")
    if max_new_tokens < 1:
        raise BadInput("must be at least 1", field="--max-new-tokens")
    project = project or load_project()
    check_base_name(base or project.base)
    if started is not None:
        started()
    mixture = Mixture.open(ws or workspace(), project, base=base)
    answer = mixture.answer([chat_turn(prompt, system=system, tools=tools, specialist=specialist,
                                       max_new_tokens=max_new_tokens)], keep_for_feedback=False)[0]
    return _reply(mixture, prompt, answer)


def _forward_text(on_text: Callable[[str], object]):
    """A runtime listener that hands each non-empty piece of the reply to ``on_text`` (the REPL stays)."""
    def listener(delta: str) -> bool:
        if delta:
            on_text(delta)
        return True
    return listener


@dataclass
class SessionEvent:
    kind: str                        # reply | feedback | specialist | quit | error | help
    message: str = ""
    reply: ChatReply | None = None


@dataclass
class ChatSession:
    """A REPL's state: the conversation, the forced specialist, the last answered turn awaiting feedback."""

    mixture: Mixture
    system: str | None = None
    max_new_tokens: int = 64
    specialist: str | None = None
    tools: list[dict] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    session_id: str = field(default_factory=lambda: f"chat-{int(time.time())}")
    last_answer: str | None = None
    last_feedback: dict = field(default_factory=dict)   # rating and/or correction for the last answer

    HELP = ("/feedback +1|-1   rate the last answer\n/correct TEXT     the answer it should have given\n"
            "/specialist NAME  force a specialist (/specialist auto: route again)\n/quit")

    def handle(self, line: str, on_text: Callable[[str], object] | None = None) -> SessionEvent:
        """One line typed by the user: a command or a message; ``on_text`` receives the reply as it is decoded."""
        text = line.strip()
        if not text:
            return SessionEvent("help", self.HELP)
        if text.startswith("/"):
            command, _, argument = text.partition(" ")
            argument = argument.strip()
            try:
                return self._command(command, argument)
            except MintError as exc:
                return SessionEvent("error", str(exc))
        try:
            check_unicode(text, "message")
        except BadInput as exc:
            return SessionEvent("error", str(exc))
        self._log_last_turn()
        listener = None if on_text is None else _forward_text(on_text)
        turn = chat_turn(text, system=self.system, history=self.messages, tools=self.tools,
                         specialist=self.specialist, max_new_tokens=self.max_new_tokens, session=self.session_id)
        answer = self.mixture.answer([turn], listeners=[listener])[0]
        self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": answer.text}]
        self.last_answer = answer.id
        return SessionEvent("reply", reply=_reply(self.mixture, text, answer))

    def _command(self, command: str, argument: str) -> SessionEvent:
        if command in ("/quit", "/exit"):
            self.close()
            return SessionEvent("quit")
        if command == "/help":
            return SessionEvent("help", self.HELP)
        if command == "/specialist":
            if argument in ("", "auto"):
                self.specialist = None
                return SessionEvent("specialist", "the router picks the specialist again")
            if argument not in self.mixture.project.names:
                raise BadInput(f"unknown specialist {argument!r}{closest(argument, self.mixture.project.names)} (expected {', '.join(self.mixture.project.names)} "
                               "or auto)", field="/specialist")
            self.specialist = argument
            return SessionEvent("specialist", f"{argument} answers from now on")
        if command in ("/feedback", "/correct"):
            if self.last_answer is None:
                raise BadInput("no answer to give feedback on yet", field=command)
            if command == "/feedback":
                ratings = {"+1": 1, "1": 1, "-1": -1, "0": 0}
                if argument not in ratings:
                    raise BadInput(f"{argument!r}: expected +1, -1 or 0", field="/feedback")
                self.last_feedback["rating"] = ratings[argument]
            else:
                if not argument:
                    raise BadInput("expected the answer it should have given: /correct TEXT", field="/correct")
                check_unicode(argument, "/correct")
                self.last_feedback["correction"] = argument
            return SessionEvent("feedback", "noted; logged with the turn")
        raise BadInput(f"unknown command {command} (try /help)", field="command")

    def _log_last_turn(self) -> None:
        """The previous turn gets no more feedback: log it with what it got."""
        if self.last_answer is not None and self.last_feedback:
            self.mixture.feedback(self.last_answer, **self.last_feedback)
        self.last_answer, self.last_feedback = None, {}
        self.mixture.expire_pending(all_of_them=True)

    def close(self) -> None:
        self._log_last_turn()
        self.mixture.close()
