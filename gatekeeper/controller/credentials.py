"""Credentials that follow a rotated token, without breaking the requests in flight.

Why this exists: a service account token is rotated by the kubelet (bound tokens live an
hour). kr8s reloads credentials on a 401 only when it raises for status, and then rebuilds
its HTTP session, which breaks every other request in flight; the gatekeeper reads
statuses itself (see ``errors.raise_for_status``), so it would keep sending the old token
and get 401 for ever while its probes stay green. On a 401, ``Credentials.refresh`` reloads
them once (at most every ``min_interval`` seconds, however many requests saw the 401) and
puts the new token on the session's headers, which new requests use.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

__all__ = ["Credentials"]

log = logging.getLogger("gatekeeper.credentials")


class Credentials:
    """Reloads the API client's credentials after a 401."""

    def __init__(self, api: Any, *, min_interval: float = 10.0) -> None:
        self.api = api
        self.min_interval = min_interval
        self.refreshes = 0
        self._lock = anyio.Lock()
        self._last = float("-inf")

    async def refresh(self) -> None:
        async with self._lock:
            if time.monotonic() - self._last < self.min_interval:
                return  # another request refreshed them just now
            self._last = time.monotonic()
            auth = getattr(self.api, "auth", None)
            if auth is None:
                return
            await auth.reauthenticate()
            # kr8s keeps the token on its session's headers; new requests take it from there.
            session = getattr(self.api, "_session", None)
            token = getattr(auth, "token", None)
            if session is not None and token:
                session.headers["Authorization"] = f"Bearer {token}"
            self.refreshes += 1
            log.info("credentials reloaded after a 401")
