"""The streamed gather's full-duplex HTTP/1.1 exchange.

httpx (httpcore) sends a request's whole body before it reads the answer,
and the server reads a streamed gather's tasks only a window ahead of the
results it has written: a batch larger than the window would stall both
ends. So this one route is spoken directly over a socket: the tasks go
out as a chunked body from a thread (or an asyncio task) while the
results are read as they come.
"""

from __future__ import annotations

import asyncio
import http.client
import queue
import socket
import ssl
import threading
from typing import Any, AsyncIterable, AsyncIterator, Generator, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from . import errors as E
from ._wire import GatherItem, GatherLines, encode_task

# A body chunk is sent once this much is buffered, or when no more tasks
# are ready (a slow source's tasks do not wait for company).
_CHUNK = 32 << 10
# Encoded tasks waiting for the socket: the source is not read further
# ahead than this (the server's window bounds the rest).
_QUEUE = 1024
_MAX_ERROR_BODY = 64 << 10


def _target(base: str, path: str) -> tuple[str, int, bool, str, str]:
    u = urlsplit(base)
    tls = u.scheme == "https"
    port = u.port or (443 if tls else 80)
    host = u.hostname or ""
    hosthdr = u.netloc
    return host, port, tls, hosthdr, (u.path or "") + path


def _head(method: str, target: str, hosthdr: str, headers: Mapping[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {hosthdr}", "Transfer-Encoding: chunked", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_END = object()


class GatherStream(Iterator[GatherItem]):
    """The results of Client.gather_stream, as they finish. Leaving the
    loop (or close()) ends the batch; cancel(), from any thread, ends it
    too, and the loop blocked on the next result raises CancelledError."""

    def __init__(self, base: str, path: str, headers: Mapping[str, str], tasks: Iterable[Any],
                 connect_timeout: float | None, ahead: int) -> None:
        # The generator holds the state, not self: no cycle, so a stream
        # the loop left is closed as soon as it is dropped.
        self._st = _State()
        self._gen = _gather_sync(self._st, base, path, headers, tasks, connect_timeout, ahead)

    def __iter__(self) -> GatherStream:
        return self

    def __enter__(self) -> GatherStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __next__(self) -> GatherItem:
        return next(self._gen)

    def close(self) -> None:
        """Ends the batch: the connection closes, and the server cancels
        the tasks still running."""
        self._gen.close()

    def cancel(self) -> None:
        """close() from another thread: the consumer's loop ends with
        CancelledError."""
        self._st.cancelled.set()
        with self._st.lock:
            if self._st.sock is not None:
                _shutdown(self._st.sock)


class _State:
    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None


def _gather_sync(
    owner: _State,
    base: str,
    path: str,
    headers: Mapping[str, str],
    tasks: Iterable[Any],
    connect_timeout: float | None,
    ahead: int,
) -> Generator[GatherItem, None, None]:
    host, port, tls, hosthdr, target = _target(base, path)
    if owner.cancelled.is_set():
        raise E.CancelledError("client: the streamed gather was cancelled")
    try:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
    except OSError as e:
        raise _transport(e) from e
    if tls:
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    sock.settimeout(None)  # the stream lasts as long as its batch
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # chunks go as they are cut
    with owner.lock:
        owner.sock = sock
    if owner.cancelled.is_set():
        _shutdown(sock)
    lines = GatherLines()
    stop = threading.Event()
    q: queue.Queue[Any] = queue.Queue(_QUEUE)
    fault: list[BaseException] = []
    # Tasks sent ahead of the results read are bounded (a few times the
    # server's window): the source is read no faster than the batch goes.
    taken = [0]
    progress = threading.Condition()

    def produce() -> None:
        # Runs the caller's iterable: it may be slow or endless.
        try:
            for i, task in enumerate(tasks):
                with progress:
                    while i - taken[0] >= ahead and not stop.is_set():
                        progress.wait(0.1)
                line, bad = encode_task(i, task)
                if bad is not None:
                    lines.invalid[i] = bad
                while not stop.is_set():
                    try:
                        q.put(line, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as e:  # the caller's iterable failed: end the batch
            fault.append(e)
            stop.set()
            _close(sock)
            return
        finally:
            while not stop.is_set():
                try:
                    q.put(_END, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def send() -> None:
        try:
            sock.sendall(_head("POST", target, hosthdr, headers))
            done = False
            while not done and not stop.is_set():
                try:
                    first = q.get(timeout=0.1)
                except queue.Empty:
                    continue
                buf = bytearray()
                item = first
                while True:
                    if item is _END:
                        done = True
                        break
                    buf += item
                    if len(buf) >= _CHUNK:
                        break
                    try:
                        item = q.get_nowait()
                    except queue.Empty:
                        break
                if buf:
                    sock.sendall(_chunk(bytes(buf)))
            if done:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server closed, or the reader did: the answer says why

    producer = threading.Thread(target=produce, name="svc-gather-tasks", daemon=True)
    sender = threading.Thread(target=send, name="svc-gather-send", daemon=True)
    producer.start()
    sender.start()
    resp: http.client.HTTPResponse | None = None
    try:
        resp = http.client.HTTPResponse(sock, method="POST")
        try:
            resp.begin()
        except (OSError, http.client.HTTPException) as e:
            if owner.cancelled.is_set():
                raise E.CancelledError("client: the streamed gather was cancelled") from None
            if fault:
                raise fault[0]
            raise _transport(e) from e
        if not 200 <= resp.status <= 299:
            body = resp.read(_MAX_ERROR_BODY)
            raise E.error_from_problem(resp.status, resp.getheader("Content-Type") or "", body, resp.getheader("X-Request-Id") or "")
        while True:
            try:
                line = resp.readline(1 << 24)
            except (OSError, http.client.HTTPException) as e:
                if owner.cancelled.is_set():
                    raise E.CancelledError("client: the streamed gather was cancelled") from None
                if fault:
                    raise fault[0]
                raise _transport(e) from e
            if not line:
                if owner.cancelled.is_set():
                    raise E.CancelledError("client: the streamed gather was cancelled")
                if fault:
                    raise fault[0]
                if lines.summary is None:
                    raise E.AgentRuntimeError("client: the gather stream ended before its summary")
                return
            item = lines.decode(line)
            if item is not None:
                with progress:
                    taken[0] += 1
                    progress.notify()
                yield item
            elif lines.summary is not None:
                return
    finally:
        stop.set()
        _close(sock)
        if resp is not None:
            resp.close()
        sender.join()
        # The producer ends after the task the iterable is producing, if any.
        producer.join(timeout=5)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    _shutdown(sock)
    sock.close()


def _transport(e: BaseException) -> E.SvcError:
    if isinstance(e, (socket.timeout, TimeoutError)):
        return E.TimeoutError(f"svc client: {e}")
    return E.AgentRuntimeError(f"svc client: {e}", kind="AgentRuntimeError")


async def gather_stream_async(
    base: str,
    path: str,
    headers: Mapping[str, str],
    tasks: Iterable[Any] | AsyncIterable[Any],
    connect_timeout: float | None,
    ahead: int,
) -> AsyncIterator[GatherItem]:
    host, port, tls, hosthdr, target = _target(base, path)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ssl.create_default_context() if tls else None,
                                    limit=1 << 24),
            connect_timeout,
        )
    except (OSError, asyncio.TimeoutError) as e:
        raise _transport(e) from e
    lines = GatherLines()
    fault: list[BaseException] = []
    taken = 0
    progress = asyncio.Event()

    async def send() -> None:
        try:
            writer.write(_head("POST", target, hosthdr, headers))
            buf = bytearray()
            i = 0

            async def put(task: Any) -> None:
                nonlocal i, buf
                while i - taken >= ahead:
                    # Far enough ahead: send what is held, wait for results.
                    if buf:
                        writer.write(_chunk(bytes(buf)))
                        buf = bytearray()
                    progress.clear()
                    await progress.wait()
                line, bad = encode_task(i, task)
                if bad is not None:
                    lines.invalid[i] = bad
                i += 1
                buf += line
                if len(buf) >= _CHUNK:
                    writer.write(_chunk(bytes(buf)))
                    buf = bytearray()
                    await writer.drain()
                    # drain() returns at once while the kernel takes the
                    # bytes: give the reader its turn all the same.
                    await asyncio.sleep(0)

            if isinstance(tasks, AsyncIterable):
                async for task in tasks:
                    await put(task)
                    if buf:  # an async source may pause: send what is ready
                        writer.write(_chunk(bytes(buf)))
                        buf = bytearray()
                        await writer.drain()
            else:
                for task in tasks:
                    await put(task)
            if buf:
                writer.write(_chunk(bytes(buf)))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (OSError, ConnectionError):
            pass  # the server closed: the answer says why
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the caller's iterable failed
            fault.append(e)
            writer.close()

    sender = asyncio.create_task(send())
    try:
        try:
            status, hdrs = await _read_head(reader)
        except (OSError, ConnectionError, ValueError, asyncio.IncompleteReadError) as e:
            if fault:
                raise fault[0]
            raise _transport(e) from e
        body_lines = _body_lines(reader, hdrs)
        if not 200 <= status <= 299:
            data = b""
            async for chunk in body_lines:
                data += chunk
                if len(data) > _MAX_ERROR_BODY:
                    break
            raise E.error_from_problem(status, hdrs.get("content-type", ""), data, hdrs.get("x-request-id", ""))
        try:
            async for line in body_lines:
                item = lines.decode(line)
                if item is not None:
                    taken += 1
                    progress.set()
                    yield item
                elif lines.summary is not None:
                    return
        except (OSError, ConnectionError, ValueError, asyncio.IncompleteReadError) as e:
            if fault:
                raise fault[0]
            raise _transport(e) from e
        if fault:
            raise fault[0]
        raise E.AgentRuntimeError("client: the gather stream ended before its summary")
    finally:
        sender.cancel()
        writer.close()
        try:
            await sender
        except BaseException:
            pass


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    while True:
        line = await reader.readline()
        if not line:
            raise ConnectionError("the server closed the connection before answering")
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError(f"malformed status line {line!r}")
        status = int(parts[1])
        hdrs: dict[str, str] = {}
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if 100 <= status < 200:
            continue  # 100 Continue: the real answer follows
        return status, hdrs


async def _body_lines(reader: asyncio.StreamReader, hdrs: Mapping[str, str]) -> AsyncIterator[bytes]:
    """The answer's body as lines (each with its newline, the last maybe without)."""
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        pending = b""
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise asyncio.IncompleteReadError(pending, None)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            data = await reader.readexactly(size + 2)
            pending += data[:-2]
            while True:
                nl = pending.find(b"\n")
                if nl < 0:
                    break
                yield pending[: nl + 1]
                pending = pending[nl + 1 :]
        if pending:
            yield pending
        return
    length = hdrs.get("content-length")
    if length is not None:
        data = await reader.readexactly(int(length))
        for line in data.splitlines(keepends=True):
            yield line
        return
    while True:
        line = await reader.readline()
        if not line:
            return
        yield line
