"""Who may call `mint serve` and how much one request, one client and the queue may take.

Plain data and checks, with no web framework imported, so the CLI can build them before the model loads.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass

from mint.errors import BadInput

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Limits:
    """What one request, one client and the queue may take (see the module's docstring)."""
    max_body_bytes: int = 1 << 20
    max_messages: int = 256
    max_prompt_chars: int | None = None   # None: 8 characters per token of the base's context
    max_queue: int = 128                  # turns waiting or generating; beyond: 429
    max_per_key: int = 32                 # requests in flight per API key (per client address without keys)
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_messages", "max_queue", "max_per_key"):
            if getattr(self, name) < 1:
                raise BadInput("must be at least 1", field=f"--{name.replace('_', '-')}")
        if self.max_prompt_chars is not None and self.max_prompt_chars < 1:
            raise BadInput("must be at least 1", field="--max-prompt-chars")


@dataclass(frozen=True)
class Access:
    """Who may call: the API keys (none: anyone who reaches the port) and the Host names requests may carry
    besides the loopback ones (``*``: any)."""
    api_keys: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key in self.api_keys:
            if not key or not key.strip() or not key.isprintable() or len(key) < 8:
                raise BadInput("an API key must be 8 or more printable characters", field="--api-key")

    def owner(self, authorization: str | None) -> str | None:
        """The fingerprint of the key ``authorization`` (``Bearer KEY``) carries, or None when it carries none of
        the keys. Every key is compared, in constant time, so the reply's timing tells nothing."""
        scheme, _, given = (authorization or "").partition(" ")
        given_digest = hashlib.sha256(given.strip().encode("utf-8", "surrogatepass")).digest()
        found = None
        for key in self.api_keys:
            digest = hashlib.sha256(key.encode("utf-8")).digest()
            if hmac.compare_digest(digest, given_digest) and scheme.lower() == "bearer":
                found = digest.hex()[:16]
        return found

    def host_allowed(self, host_header: str | None) -> bool:
        if "*" in self.allowed_hosts:
            return True
        if not host_header:
            return False
        host = host_header.strip().lower()
        if host.startswith("["):                   # [::1]:8000
            host = host[1:].split("]", 1)[0]
        elif host.count(":") == 1:
            host = host.split(":", 1)[0]
        return host in LOOPBACK_NAMES or host in {h.lower() for h in self.allowed_hosts}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address the server listens on) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
