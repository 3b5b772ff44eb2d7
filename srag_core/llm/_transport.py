"""The HTTP transport's total deadline and size cap: every socket operation of an attempt waits at most until the
attempt's deadline and reads at most its byte budget, so a server dripping a byte at a time cannot hold a request
and a huge body cannot fill memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpcore2
import httpx2

# This thread's current HTTP attempt: .at, the monotonic time by which it must be over; .left, the bytes it may
# still read (status line, headers and body, a 4xx/5xx body too, which the SDK reads whole before raising).
_DEADLINE = threading.local()


@contextmanager
def bounded_attempt(until: float, max_bytes: int) -> Iterator[None]:
    """Every socket operation of the HTTP attempt made inside waits at most until `until` and reads at most
    `max_bytes` in all (past that, `_Oversize`); needs a client from `_deadline_http_client`."""
    _DEADLINE.at, _DEADLINE.left = until, max_bytes
    try:
        yield
    finally:
        _DEADLINE.at = _DEADLINE.left = None


def _clip(timeout: float | None, error: type[Exception]) -> float | None:
    """The socket timeout for the next network operation: never past the current attempt's deadline."""
    at = getattr(_DEADLINE, "at", None)
    if at is None:
        return timeout
    remaining = at - time.monotonic()
    if remaining <= 0:
        raise error("the request ran past its total deadline")
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore2.NetworkStream):
    """A network stream whose every read and write waits at most until the attempt's total deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self.inner.read(max_bytes, _clip(timeout, httpcore2.ReadTimeout))
        left = getattr(_DEADLINE, "left", None)
        if left is not None:
            _DEADLINE.left = left - len(data)
            if _DEADLINE.left < 0:  # not an httpcore error: it passes through httpx and the SDK to the caller
                raise _Oversize("reply is over the size limit")
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _clip(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname,
                                                    _clip(timeout, httpcore2.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self.inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.connect_tcp(host, port, _clip(timeout, httpcore2.ConnectTimeout),
                                                      local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.connect_unix_socket(path, _clip(timeout, httpcore2.ConnectTimeout),
                                                              socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class TransportError(ValueError):
    """The installed HTTP stack lacks what the total deadline per request is built on, so the client refuses to
    start (a ValueError: like a bad config, the command reports it in one line)."""


def _deadline_http_client() -> httpx2.Client:
    """The SDK's default HTTP client with every socket operation clipped to the calling thread's deadline.

    httpx has per-operation timeouts only; the connection pool's network backend is the one place where each read can
    see the wall clock. `_pool._network_backend` (httpcore) and `_mounts` (httpx: proxies from the environment) are
    private attributes, set here before any connection exists. If a release of httpx2 or httpcore2 no longer has
    them, the deadline cannot be enforced, and the client refuses to start (`TransportError`) rather than run
    without it."""
    import openai
    client = openai.DefaultHttpxClient()  # the SDK's limits, and proxies from the environment as it would use them
    transports = [client._transport, *getattr(client, "_mounts", {}).values()]
    for each in (t for t in transports if t is not None):
        pool = getattr(each, "_pool", None)
        if pool is None or not hasattr(pool, "_network_backend"):
            client.close()
            raise TransportError(
                f"httpx2 {_version('httpx2')} / httpcore2 {_version('httpcore2')}: the transport "
                f"{type(each).__name__} has no connection pool with a network backend (`_pool._network_backend`), "
                "so no request could be held to its total deadline; install the versions pyproject.toml allows")
        if not isinstance(pool._network_backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(pool._network_backend)
    return client


def check_transport() -> None:
    """Raise `TransportError` now if this installation cannot hold a request to its total deadline (a run checks
    this before it starts any worker, so a library upgrade that moved httpx internals stops it at once)."""
    _deadline_http_client().close()


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def read_body(response: httpx2.Response) -> bytes:
    """A streamed response's whole body (read inside `bounded_attempt`, which stops a body past its size)."""
    try:
        return response.read()
    finally:
        response.close()


class _Oversize(Exception):
    """A reply larger than the configured caps."""
