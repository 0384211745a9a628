"""Snapshot push to the advisor: `POST {advisor_url}/v1/telemetry` to every address the advisor's name resolves to.

The advisor runs as several replicas behind a headless Service and each replica must hold the whole cluster state,
so the collector sends each snapshot to every A/AAAA record. Sending happens on a background thread fed by a small
queue that drops the oldest snapshot when full: a slow or unreachable advisor never stalls the collection cycle.
Failures and drops are counted as `gpuadvisor_collector_errors_total{kind="push"}`. A push that finds its kept-alive
connection closed by the advisor is sent once more on a fresh connection (counted as `kind="push_retry"`).
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from collector.snapshot import NodeSnapshot
from collector.stats import CollectorStats

log = logging.getLogger(__name__)

TELEMETRY_PATH = "/v1/telemetry"
# How long the advisor keeps an idle connection open (uvicorn's timeout_keep_alive, set where `advisor serve` and
# `up` start it): above any usual push interval, so a push seldom races the server closing the kept connection.
ADVISOR_KEEP_ALIVE_SECONDS = 75
# The server closed a kept-alive connection as the request went out: nothing was processed, a fresh connection works.
_DISCONNECTS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


@dataclass(frozen=True, slots=True)
class PushTarget:
    """One advisor replica: the URL to connect to (host replaced by an address) and the original host name."""

    url: str
    host_header: str
    server_name: str


def resolve_addresses(host: str, port: int) -> list[str]:
    """Every distinct address of `host` (A and AAAA records), in resolver order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def push_targets(advisor_url: str, resolve: Callable[[str, int], list[str]] = resolve_addresses) -> list[PushTarget]:
    """The telemetry URL once per resolved address of the advisor's host (once when the host is an IP literal)."""
    parts = urlsplit(advisor_url.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"advisor_url: expected http(s)://host[:port], got {advisor_url!r}")
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path + TELEMETRY_PATH
    try:
        ipaddress.ip_address(host)
        addresses = [host]
    except ValueError:
        addresses = resolve(host, port)
    targets = []
    for address in addresses:
        literal = f"[{address}]" if ":" in address else address
        netloc = f"{literal}:{port}"
        targets.append(
            PushTarget(url=urlunsplit((parts.scheme, netloc, path, "", "")), host_header=parts.netloc, server_name=host)
        )
    return targets


class SnapshotPusher:
    """Background sender of snapshots to every advisor replica (the `SnapshotSink` of a CollectorAgent)."""

    def __init__(
        self,
        advisor_url: str,
        *,
        stats: CollectorStats,
        token: str | None = None,
        token_file: Path | None = None,
        timeout_seconds: float = 2.0,
        queue_size: int = 2,
        resolve: Callable[[str, int], list[str]] = resolve_addresses,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        push_targets(advisor_url, lambda host, port: [])  # validates the URL now, not on the sender thread
        self.advisor_url = advisor_url
        self._stats = stats
        self._resolve = resolve
        self._headers = {"Authorization": f"Bearer {token}"} if token and token_file is None else {}
        self._token_file = token_file
        self._token_file_fault: str | None = None
        self._timeout_seconds = timeout_seconds
        self._transport = transport
        self._client = self._new_client()
        self._queue: queue.Queue[NodeSnapshot | None] = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name="collector-push", daemon=True)
        self._failing: set[str] = set()
        self.sent = 0

    def _new_client(self) -> httpx.Client:
        return httpx.Client(timeout=self._timeout_seconds, headers=self._headers, transport=self._transport)

    def _post(self, target: PushTarget, body: bytes) -> httpx.Response:
        """POST once; when the server dropped the kept connection, once more on a fresh one (counted `push_retry`)."""
        try:
            return self._send(target, body)
        except _DISCONNECTS as e:
            self._stats.add_error("push_retry")
            log.debug("push to %s: %s; retrying on a fresh connection", target.url, e)
        self._client.close()  # drops every pooled connection, so the retry cannot reuse a stale one
        self._client = self._new_client()
        return self._send(target, body)

    def _authorization(self) -> dict[str, str]:
        """The header of `token_file`'s token, read now (it rotates); {} while it cannot be read (logged once)."""
        if self._token_file is None:
            return {}
        try:
            token = self._token_file.read_text().strip()
        except OSError as e:
            fault = f"cannot read the push token {self._token_file}: {e.strerror or e}"
            if fault != self._token_file_fault:
                self._token_file_fault = fault
                log.warning("%s; pushing without it", fault)
            return {}
        self._token_file_fault = None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _send(self, target: PushTarget, body: bytes) -> httpx.Response:
        return self._client.post(
            target.url,
            content=body,
            headers={"Host": target.host_header, "Content-Type": "application/json", **self._authorization()},
            extensions={"sni_hostname": target.server_name},
        )

    def submit(self, snapshot: NodeSnapshot) -> None:
        """Queue a snapshot without blocking; when the queue is full the oldest one is dropped and counted."""
        while True:
            try:
                self._queue.put_nowait(snapshot)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self._stats.add_error("push")
                except queue.Empty:
                    continue

    def send(self, snapshot: NodeSnapshot) -> int:
        """Send synchronously to every replica; returns how many accepted it. Never raises for network errors."""
        try:
            targets = push_targets(self.advisor_url, self._resolve)
        except OSError as e:
            self._note_failure(self.advisor_url, f"cannot resolve: {e}")
            return 0
        body = snapshot.model_dump_json().encode()
        accepted = 0
        for target in targets:
            try:
                response = self._post(target, body)
            except httpx.HTTPError as e:
                self._note_failure(target.url, f"{type(e).__name__}: {e}")
                continue
            if response.is_success:
                accepted += 1
                if target.url in self._failing:
                    self._failing.discard(target.url)
                    log.info("push to %s works again", target.url)
            else:
                self._note_failure(target.url, f"HTTP {response.status_code}: {response.text[:200]}")
        self.sent += accepted
        return accepted

    def _note_failure(self, where: str, why: str) -> None:
        self._stats.add_error("push")
        if where not in self._failing:
            self._failing.add(where)
            log.warning("push to %s failed: %s (logged again only after it recovers)", where, why)

    def _run(self) -> None:
        while True:
            snapshot = self._queue.get()
            if snapshot is None:
                return
            self.send(snapshot)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the snapshot being sent (pending ones are dropped)."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join()
        self._client.close()
