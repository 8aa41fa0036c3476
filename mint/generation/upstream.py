"""A client of an OpenAI-compatible server (vLLM, or a second `mint serve`): what the gateway forwards turns to,
and what a contract evaluation on a served engine decodes with (mint.contract.served). It sits beside mint's own
engine, below the server and the evaluation, which both use it.

``UpstreamClient`` speaks to one upstream (``Upstream``: its URL, key and timeout). On the gateway's poller
thread it lists the upstream's models, reads its /health and loads or unloads adapters by name (vLLM's runtime
LoRA API); on the app's event loop it asks for a chat completion, whole (``complete``) or streamed (``stream``:
server-sent events, each content delta handed to a listener). Every failure is an ``UpstreamError``: an upstream
that cannot be reached, answers an error or something other than a completion, or breaks off mid-answer is a
502; one that does not answer within the timeout (to connect, to send its answer's first byte, or between any
two pieces of a streamed answer) is a 504. Nothing waits without a limit.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from mint.errors import BadInput, MintError

if TYPE_CHECKING:
    import httpx

DEFAULT_UPSTREAM_TIMEOUT_S = 60.0


class UpstreamError(MintError):
    """The upstream failed a turn: ``status`` 502 (unreachable, or it answered an error), 504 (no answer in
    time) or 400 (it refused the request as the client asked it)."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Upstream:
    """An OpenAI-compatible server: ``url`` (with or without ``/v1``), its API key, the seconds a request may wait
    for it (to connect, and between any two pieces of an answer)."""
    url: str
    key: str | None = None
    timeout_s: float = DEFAULT_UPSTREAM_TIMEOUT_S

    def __post_init__(self) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadInput(f"{self.url!r} is not an http(s) URL", field="--upstream")
        if not self.timeout_s > 0:
            raise BadInput("must be more than 0", field="--upstream-timeout")

    @property
    def api(self) -> str:
        """The URL that ``/chat/completions`` and ``/models`` follow."""
        url = self.url.rstrip("/")
        return url if url.endswith("/v1") else f"{url}/v1"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}


@dataclass(frozen=True)
class Completion:
    """An upstream's answer: its text, finish reason and usage (as it said them)."""
    text: str
    finish_reason: str | None
    usage: dict = field(default_factory=dict)


def refused(status: int, text: str) -> "UpstreamError":
    """The error of an upstream that answered ``status``: its 400 (a request it cannot take, as the client asked
    it) is the client's 400; anything else, a 502."""
    return UpstreamError(upstream_message(status, text), 400 if status in (400, 422) else 502)


def upstream_message(status: int, text: str) -> str:
    """What an upstream's error reply says (OpenAI's ``error.message``, else the start of its body)."""
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text[:300]
    return f"the upstream answered {status}: {message}"


class UpstreamClient:
    """One upstream's client: blocking calls for the poller (``models``, ``health``, ``load_adapter``,
    ``unload_adapter``), coroutines for the app's event loop (``complete``, ``stream``) between ``open`` and
    ``close``."""

    def __init__(self, upstream: Upstream, *, connect_s: float | None = None) -> None:
        import httpx

        self.upstream = upstream
        # ``connect_s``: a shorter wait to connect than for an answer (a host that is down fails in seconds)
        self._http = httpx.Client(timeout=httpx.Timeout(upstream.timeout_s, connect=connect_s or upstream.timeout_s))
        self._async: httpx.AsyncClient | None = None

    # --- the poller's side ------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict | None = None):
        import httpx

        url = f"{self.upstream.api}{path}"
        try:
            return self._http.request(method, url, json=body, headers=self.upstream.headers())
        except httpx.TimeoutException:
            raise UpstreamError(f"{url} did not answer within {self.upstream.timeout_s:g} s", 504) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {url}: {exc}") from None

    def models(self) -> list[dict]:
        """The upstream's /v1/models entries (those with an id)."""
        reply = self._call("GET", "/models")
        if reply.status_code != 200:
            raise UpstreamError(f"{self.upstream.api}/models answered {reply.status_code}: {reply.text[:300]}")
        try:
            return [m for m in reply.json()["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        except (ValueError, KeyError, TypeError):
            raise UpstreamError(f"{self.upstream.api}/models did not answer a model list") from None

    def health(self) -> dict | None:
        """The upstream's /health as JSON (a mint upstream says ``max_rank`` to a key); None when it says nothing
        readable (vLLM answers an empty 200)."""
        import httpx

        try:
            reply = self._http.get(f"{self.upstream.api.removesuffix('/v1')}/health", headers=self.upstream.headers())
            said = reply.json() if reply.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return said if isinstance(said, dict) else None

    def version(self) -> str | None:
        """What the upstream's /version says (vLLM: ``{"version": "0.9.1"}``); None when it says nothing readable."""
        import httpx

        try:
            reply = self._http.get(f"{self.upstream.api.removesuffix('/v1')}/version", headers=self.upstream.headers())
            said = reply.json().get("version") if reply.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return said if isinstance(said, str) else None

    def load_adapter(self, name: str, path: str) -> None:
        """Load the adapter at ``path`` (on the upstream's filesystem) as ``name``; one already loaded is fine."""
        reply = self._call("POST", "/load_lora_adapter", {"lora_name": name, "lora_path": path})
        if reply.status_code != 200 and "already been loaded" not in reply.text:
            raise UpstreamError(f"{self.upstream.api}/load_lora_adapter refused {name}: {reply.status_code} "
                                f"{reply.text[:300]}")

    def unload_adapter(self, name: str) -> None:
        """Unload ``name``; one the upstream does not have (404) is gone already."""
        reply = self._call("POST", "/unload_lora_adapter", {"lora_name": name})
        if reply.status_code not in (200, 404):
            raise UpstreamError(f"{self.upstream.api}/unload_lora_adapter refused {name}: {reply.status_code} "
                                f"{reply.text[:300]}")

    def close(self) -> None:
        self._http.close()

    # --- the event loop's side --------------------------------------------------------------

    async def open(self) -> None:
        import httpx

        self._async = httpx.AsyncClient(timeout=httpx.Timeout(self.upstream.timeout_s))

    def _opened(self) -> httpx.AsyncClient:
        """The event loop's client; ``open`` makes it (a call before it is a bug in the caller, said as such)."""
        if self._async is None:
            raise RuntimeError("UpstreamClient.open() was not awaited before its first request")
        return self._async

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()
            self._async = None

    async def complete(self, body: dict) -> Completion:
        """The upstream's chat completion of ``body`` (sent with ``stream: false``)."""
        import httpx

        url = f"{self.upstream.api}/chat/completions"
        try:
            reply = await asyncio.wait_for(self._opened().post(url, json={**body, "stream": False},
                                                            headers=self.upstream.headers()),
                                           self.upstream.timeout_s)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise UpstreamError(f"{url} did not answer within {self.upstream.timeout_s:g} s", 504) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {url}: {exc}") from None
        if reply.status_code != 200:
            raise refused(reply.status_code, reply.text)
        try:
            data = reply.json()
            choice = data["choices"][0]
            text, finish = choice["message"]["content"] or "", choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError):
            raise UpstreamError(f"{url} answered something other than a chat completion") from None
        usage = data.get("usage")
        return Completion(text, finish, usage if isinstance(usage, dict) else {})

    async def stream(self, body: dict, listener: Callable[[str], bool]) -> Completion:
        """The upstream's chat completion of ``body`` as it streams it (``stream: true``): ``listener("")`` once the
        upstream has accepted the request, then each content delta; a listener that refuses (its client left) ends
        the reading, an UpstreamError."""
        import httpx

        url = f"{self.upstream.api}/chat/completions"
        # the usage comes in a last chunk of its own, only when asked for
        outgoing = self._opened().build_request("POST", url, json={**body, "stream": True,
                                                                "stream_options": {"include_usage": True}},
                                             headers=self.upstream.headers())
        try:
            reply = await asyncio.wait_for(self._opened().send(outgoing, stream=True), self.upstream.timeout_s)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise UpstreamError(f"{url} did not answer within {self.upstream.timeout_s:g} s", 504) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {url}: {exc}") from None
        try:
            if reply.status_code != 200:
                try:
                    text = (await asyncio.wait_for(reply.aread(), self.upstream.timeout_s)).decode("utf-8", "replace")
                except (asyncio.TimeoutError, httpx.HTTPError):
                    text = ""
                raise refused(reply.status_code, text)
            listener("")         # the answer starts now: the role delta goes out before the first word
            return await self._read_events(reply, listener)
        finally:
            await reply.aclose()

    async def _read_events(self, reply, listener: Callable[[str], bool]) -> Completion:
        import httpx

        usage: dict
        pieces, finish, usage = [], None, {}
        try:
            async for line in reply.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise UpstreamError(f"the upstream failed mid-answer: {chunk['error'].get('message')}")
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    delta = (choice.get("delta") or {}).get("content") or ""
                    if delta:
                        pieces.append(delta)
                        if not listener(delta):     # the client left: stop the upstream's answer too
                            raise UpstreamError("the client left")
                    finish = choice.get("finish_reason") or finish
        except httpx.TimeoutException:
            raise UpstreamError(f"the upstream sent nothing for {self.upstream.timeout_s:g} s mid-answer", 504) \
                from None
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise UpstreamError(f"the upstream's stream broke off: {type(exc).__name__}: {exc}") from None
        return Completion("".join(pieces), finish, usage if isinstance(usage, dict) else {})
