"""A fault-injecting HTTP proxy between an object-store client and its server, for the soak and the fault tests.

It listens on 127.0.0.1 and forwards each HTTP/1.1 request to the upstream server (a moto S3 server in the tests),
request by request, so a fault lands on a request, at a moment the caller chooses:

- ``pass``: forward;
- ``refuse``: cut every open connection and reset each new one as it arrives (the store is gone);
- ``drop``: cut the connection, with probability ``p`` per request, after the request was sent upstream and part of
  the answer came back (the server may have done the write; the client never hears);
- ``stall``: hold each request ``seconds`` before forwarding it (a slow store; clients time out);
- ``error``: answer a share ``p`` of requests with a server error without forwarding them: ``503 SlowDown`` (a store
  shedding load: clients back off and retry) or, with ``status=500``, ``500 InternalError`` (a failing store).

:meth:`FaultProxy.after` switches mode at a known point: once ``n`` requests whose request line matches a pattern
(``^PUT .*/done/c/``: a shard's commit) have been answered, so a test fails the store at a named step, never after a
sleep.
The proxy runs its own asyncio loop in a daemon thread; every method is safe to call from other threads.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import urlparse

MODES = ("pass", "refuse", "drop", "stall", "error")
ERRORS = {  # status -> (reason, the S3 error document)
    503: (b"Slow Down", b"<Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"),
    500: (b"Internal Server Error", b"<Code>InternalError</Code><Message>We encountered an internal error.</Message>"),
}


@dataclass
class Counts:
    requests: int = 0
    refused: int = 0
    dropped: int = 0
    stalled: int = 0
    errors: int = 0
    by_mode: dict[str, int] = field(default_factory=dict)


class FaultProxy:
    """``FaultProxy(upstream_url).start()``; ``.url`` is what clients use as their endpoint."""

    def __init__(self, upstream: str, *, seed: int = 0, port: int = 0) -> None:
        u = urlparse(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self.port = port
        self.rng = random.Random(seed)
        self.mode, self.p, self.seconds, self.status = "pass", 1.0, 0.0, 503
        self.counts = Counts()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._triggers: list[tuple[str, int, str, dict]] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- control (any thread) ------------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._close_server())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def set(self, mode: str, *, p: float = 1.0, seconds: float = 0.0, status: int = 503) -> None:
        """Switch to ``mode`` (one of :data:`MODES`) for the requests that follow."""
        self._call(self._set(mode, p, seconds, status))

    def after(
        self, n: int, pattern: str, mode: str, *, p: float = 1.0, seconds: float = 0.0, status: int = 503
    ) -> None:
        """Switch to ``mode`` once ``n`` more requests whose request line (``PUT /bucket/key HTTP/1.1``) matches the
        regular expression ``pattern`` have been answered (by the server, or by ``error``)."""
        self._call(self._arm(n, pattern, mode, {"p": p, "seconds": seconds, "status": status}))

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)  # type: ignore[arg-type]

    # -- inside the loop -----------------------------------------------------------------------------------------
    async def _arm(self, n: int, pattern: str, mode: str, kw: dict) -> None:
        self._triggers.append((pattern, n, mode, kw))

    async def _set(self, mode: str, p: float, seconds: float, status: int) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {MODES}")
        if status not in ERRORS:
            raise ValueError(f"status {status}: one of {sorted(ERRORS)}")
        self.mode, self.p, self.seconds, self.status = mode, p, seconds, status
        self.counts.by_mode[mode] = self.counts.by_mode.get(mode, 0) + 1
        if mode == "refuse":  # (the listener stays: one closed under a connection being accepted leaves it hanging)
            self._cut()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close_server(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._cut()

    def _cut(self) -> None:
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            self.counts.refused += 1
            writer.transport.abort()
            return
        self._writers.add(writer)
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                head = await _read_head(reader)
                if head is None:
                    return
                lines = head.split(b"\r\n")
                method = lines[0].split(b" ", 1)[0].upper()
                headers = _headers(lines[1:])
                if headers.get(b"expect", b"").lower() == b"100-continue":  # answered here: the body follows
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                    head = b"\r\n".join(ln for ln in lines if not ln.lower().startswith(b"expect:"))
                body = await _read_body(reader, headers)
                self.counts.requests += 1
                mode = self.mode
                if mode == "stall":
                    self.counts.stalled += 1
                    await asyncio.sleep(self.seconds)
                if mode == "error" and self.rng.random() < self.p:
                    self.counts.errors += 1
                    reason, error = ERRORS[self.status]
                    doc = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error>' + error + b"</Error>"
                    writer.write(
                        b"HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\n" % (self.status, reason)
                        + b"Content-Length: %d\r\n\r\n" % len(doc)
                        + (b"" if method == b"HEAD" else doc)
                    )
                    await writer.drain()
                    self._fire(lines[0].decode("latin-1"))  # answered (with an error): it counts for a trigger
                    continue
                if up is None:
                    up = await asyncio.open_connection(*self.upstream)
                up[1].write(head + b"\r\n\r\n" + body)
                await up[1].drain()
                status, rhead, rbody, close = await _read_response(up[0], method)
                if mode == "drop" and self.rng.random() < self.p:
                    self.counts.dropped += 1
                    writer.write((rhead + b"\r\n\r\n" + rbody)[: self.rng.randrange(0, len(rhead) + 4)])
                    await writer.drain()
                    writer.transport.abort()
                    return
                writer.write(rhead + b"\r\n\r\n" + rbody)
                await writer.drain()
                if close:
                    up[1].close()
                    up = None
                self._fire(lines[0].decode("latin-1"))
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            return
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
            if up is not None:
                up[1].transport.abort()

    def _fire(self, request_line: str) -> None:
        left = []
        for pattern, n, mode, kw in self._triggers:
            if re.search(pattern, request_line):
                n -= 1
            if n <= 0:
                self._loop.create_task(self._set(mode, kw["p"], kw["seconds"], kw["status"]))
            else:
                left.append((pattern, n, mode, kw))
        self._triggers = left


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        data = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    return data[:-4]


def _headers(lines: list[bytes]) -> dict[bytes, bytes]:
    out = {}
    for ln in lines:
        name, _, value = ln.partition(b":")
        out[name.strip().lower()] = value.strip()
    return out


async def _read_body(reader: asyncio.StreamReader, headers: dict[bytes, bytes]) -> bytes:
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            parts.append(size_line)
            size = int(size_line.split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            parts.append(chunk)
            if size == 0:
                return b"".join(parts)
    n = int(headers.get(b"content-length", b"0") or 0)
    return await reader.readexactly(n) if n else b""


async def _read_response(reader: asyncio.StreamReader, method: bytes) -> tuple[int, bytes, bytes, bool]:
    """(status, head, body, the server closes after it) of one response."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        head = head[:-4]
        status = int(head.split(b" ", 2)[1])
        if status != 100:
            break
    headers = _headers(head.split(b"\r\n")[1:])
    close = headers.get(b"connection", b"").lower() == b"close"
    if method == b"HEAD" or status in (204, 304) or 100 <= status < 200:
        return status, head, b"", close
    if b"content-length" in headers or headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        return status, head, await _read_body(reader, headers), close
    return status, head, await reader.read(), True
