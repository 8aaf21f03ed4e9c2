"""Request building and answer checking, shared by Client and AsyncClient."""

from __future__ import annotations

import json
import socket
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, NoReturn
from urllib.parse import urlencode

import httpx

from . import errors as E
from ._wire import (
    DEFAULT_GATHER_CONCURRENCY,
    DEFAULT_TIMEOUT,
    NDJSON,
    ahead_of,
    base_url,
    check_concurrency,
    encode_task,
    run_request_id,
    seg,
    task_dict,
)

_MAX_ERROR_BODY = 64 << 10


class Unset:
    """The default of a call's timeout: the client's."""

    def __repr__(self) -> str:
        return "<the client's timeout>"


UNSET = Unset()

Timeout = float | None | Unset


class NoAnswer:
    """The default of resume_run's answer: none given (None is an answer,
    JSON null)."""

    def __repr__(self) -> str:
        return "<no answer>"


NO_ANSWER = NoAnswer()


class _Base:
    def __init__(self, url: str, *, token: str | None = None, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self._base = base_url(url)
        self._token = token or ""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout {timeout}: want >= 0 seconds (0 or None: no bound)")
        self._timeout: float | None = timeout or None

    @property
    def base_url(self) -> str:
        """The server's URL, without a trailing slash."""
        return self._base

    def _to(self, timeout: Timeout) -> float | None:
        if isinstance(timeout, Unset):
            return self._timeout
        return timeout or None

    def _headers(self, extra: Mapping[str, str] | None = None, *, body: bool = False, accept: str = "application/json, application/problem+json") -> dict[str, str]:
        h = {"Accept": accept}
        if body:
            h["Content-Type"] = "application/json"
        if self._token:
            h["Authorization"] = f"Bearer {self._token}"
        if extra:
            h.update(extra)
        return h

    @staticmethod
    def _query(params: Mapping[str, Any]) -> str:
        q = {k: v for k, v in params.items() if v is not None}
        return "?" + urlencode(q, doseq=True) if q else ""

    @staticmethod
    def _when(v: str | datetime | None) -> str | None:
        """A since or until as the server reads it: a datetime as RFC 3339
        (a naive one taken as UTC); a string (RFC 3339, Unix milliseconds,
        or a duration before now such as "1h") as it is."""
        if isinstance(v, datetime):
            if v.tzinfo is None:
                v = v.replace(tzinfo=timezone.utc)
            return v.isoformat()
        return v

    # --- request shapes -------------------------------------------------

    @staticmethod
    def _run_req(path_kind: str, name: str, task: Mapping[str, Any], request_id: str | None) -> tuple[str, dict[str, Any], str]:
        t = task_dict(task)
        rid = run_request_id(t, request_id)
        return f"/{path_kind}/{seg(name)}/run", {"task": t, "request_id": rid}, rid

    @staticmethod
    def _gather_req(agent: str, tasks: Any, max_concurrency: int) -> tuple[str, dict[str, Any]]:
        check_concurrency(max_concurrency)
        ts = [task_dict(t) for t in tasks]
        if not ts:
            raise E.SpecValidationError("gather: no tasks", kind="SpecValidationError")
        return f"/agents/{seg(agent)}/gather", {"tasks": ts, "max_concurrency": max_concurrency}

    def _stream_req(self, agent: str, max_concurrency: int, request_id: str | None) -> tuple[str, dict[str, str], int]:
        check_concurrency(max_concurrency)
        headers = self._headers({"Content-Type": NDJSON}, accept=f"{NDJSON}, application/problem+json")
        if request_id:
            headers["X-Request-Id"] = request_id
        return f"/agents/{seg(agent)}/gather?max_concurrency={max_concurrency}", headers, ahead_of(max_concurrency)

    def _batch_req(self, target: str, max_concurrency: int, mode: str | None = None,
                   callback_url: str | None = None) -> tuple[str, dict[str, str]]:
        if not isinstance(target, str) or not target:
            raise TypeError(f"target {target!r}: want a non-empty string")
        check_concurrency(max_concurrency)
        if mode not in (None, "runtime", "provider"):
            raise ValueError(f"mode {mode!r}: want 'runtime' or 'provider'")
        headers = self._headers({"Content-Type": NDJSON})
        return "/batches" + self._query({"target": target, "max_concurrency": max_concurrency, "mode": mode,
                                         "callback_url": callback_url}), headers

    @staticmethod
    def _results_req(batch_id: str, order: str | None, after: int | None, follow: bool) -> str:
        return f"/batches/{seg(batch_id)}/results" + _Base._query(
            {"order": order, "after": after, "follow": "true" if follow else None})

    @staticmethod
    def _result_line(line: str) -> dict[str, Any] | None:
        """One line of GET /batches/{id}/results: {index, seq, result};
        a line {"error": ErrorInfo} (the stream broke) raises it."""
        if not line.strip():
            return None
        try:
            v = json.loads(line)
        except ValueError as e:
            raise E.AgentRuntimeError(f"client: a line of batch results is not JSON ({e}): {line[:80]}", kind="AgentRuntimeError") from None
        if isinstance(v, dict) and isinstance(v.get("error"), dict):
            raise E.error_from_info(v["error"])
        if not isinstance(v, dict) or "index" not in v or "result" not in v:
            raise E.AgentRuntimeError(f"client: a line of batch results is not a result: {line[:80]}", kind="AgentRuntimeError")
        return {"index": v["index"], "seq": v.get("seq"), "result": v["result"]}

    @staticmethod
    def _batch_lines(tasks: Any) -> Iterator[bytes]:
        """A batch's body: one task a line, as a streamed gather's; a task
        that cannot be encoded goes as a line the server fails as that
        task's result."""
        for i, t in enumerate(tasks):
            line, _ = encode_task(i, t)
            yield line

    @staticmethod
    def _submit_req(target: str, task: Mapping[str, Any], kind: str | None, idempotency_key: str | None, request_id: str | None,
                    callback_url: str | None = None) -> tuple[dict[str, Any], dict[str, str], str]:
        if not isinstance(target, str) or not target:
            raise TypeError(f"target {target!r}: want a non-empty string")
        t = task_dict(task)
        rid = run_request_id(t, request_id)
        body: dict[str, Any] = {"target": target, "task": t, "request_id": rid}
        if kind:
            body["kind"] = kind
        if callback_url is not None:
            body["callback_url"] = callback_url
        headers = {"X-Request-Id": rid}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return body, headers, rid

    @staticmethod
    def _resume_req(run_id: str, request_id: str, approve: bool | None, reason: str | None, answer: Any) -> tuple[str, dict[str, Any]]:
        path = f"/runs/{seg(run_id)}/resume"
        if not isinstance(request_id, str) or not request_id:
            raise TypeError(f"request_id {request_id!r}: want the id of one of the run's waiting requests (its status lists them under 'waiting')")
        body: dict[str, Any] = {"request_id": request_id}
        if approve is not None:
            body["approve"] = approve
        if reason is not None:
            body["reason"] = reason
        if not isinstance(answer, NoAnswer):
            body["answer"] = answer
        return path, body

    # --- answers --------------------------------------------------------

    @staticmethod
    def _raise_for(resp: httpx.Response, body: bytes) -> NoReturn:
        raise E.error_from_problem(resp.status_code, resp.headers.get("content-type", ""), body[:_MAX_ERROR_BODY], resp.headers.get("x-request-id", ""))

    @staticmethod
    def _decode(resp: httpx.Response, method: str, path: str) -> Any:
        if not resp.content:
            return None
        try:
            return json.loads(resp.content)
        except ValueError as e:
            raise E.AgentRuntimeError(f"client: decoding the answer of {method} {path}: {e}", status=resp.status_code, kind="AgentRuntimeError") from None

    @staticmethod
    def _check_stream(resp: httpx.Response, method: str, path: str) -> None:
        mt = resp.headers.get("content-type", "").split(";", 1)[0].strip()
        if mt != "text/event-stream":
            raise E.AgentRuntimeError(f"client: {method} {path}: the server answered {mt!r}, not an event stream", status=resp.status_code, kind="AgentRuntimeError")

    @staticmethod
    def _stream_frame(event: str, data: str) -> dict[str, Any] | None:
        """A run stream's frame as run_stream yields it; an error frame is
        raised; other frames (and a malformed delta) are None."""
        if event == "delta":
            try:
                d = json.loads(data)
            except ValueError:
                return None  # not ours to fail the run for
            return {"type": "delta", **d} if isinstance(d, dict) else None
        if event == "result":
            try:
                return {"type": "result", "result": json.loads(data)}
            except ValueError as e:
                raise E.AgentRuntimeError(f"client: decoding a run's result: {e}") from None
        if event == "error":
            try:
                st = json.loads(data).get("status")
            except (ValueError, AttributeError):
                st = None
            raise E.error_from_problem(st if isinstance(st, int) else 500, "application/problem+json", data.encode())
        return None

    @staticmethod
    def _group_result(res: Any, name: str) -> Any:
        if not isinstance(res, dict) or not ("agent_name" in res or res.get("group") is True):
            raise E.AgentRuntimeError(f"client: the result of group {name!r} is neither an agent nor a group result", kind="AgentRuntimeError")
        return res


def transport_error(e: BaseException) -> E.SvcError:
    """The error of an exchange that failed before the server answered: a
    timeout is a TimeoutError, anything else an AgentRuntimeError (status
    0), the cause chained."""
    if isinstance(e, httpx.TimeoutException):
        return E.TimeoutError(f"svc client: {type(e).__name__}: {e}")
    return E.AgentRuntimeError(f"svc client: {type(e).__name__}: {e}", kind="AgentRuntimeError")


__all__ = ["UNSET", "Timeout", "transport_error", "DEFAULT_GATHER_CONCURRENCY"]


# Nagle's algorithm: httpx writes a request's headers and its body in two
# sends, and the second waits for the server to acknowledge the first,
# which a server holds back up to 40 ms (delayed ACK): every POST took
# 40 ms on loopback. The client's connections set TCP_NODELAY, as Go's do.
_NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class _NoDelaySync:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(self, *a: Any, **kw: Any) -> Any:
        stream = self._inner.connect_tcp(*a, **kw)
        _nodelay(stream)
        return stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _NoDelayAsync:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def connect_tcp(self, *a: Any, **kw: Any) -> Any:
        stream = await self._inner.connect_tcp(*a, **kw)
        _nodelay(stream)
        return stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _nodelay(stream: Any) -> None:
    sock = stream.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP


def nodelay_transport(limits: httpx.Limits | None = None) -> httpx.HTTPTransport:
    """httpx's transport with TCP_NODELAY on its connections."""
    kw: dict[str, Any] = {"limits": limits} if limits else {}
    try:
        make: Any = httpx.HTTPTransport  # socket_options: httpx 0.24 and later
        t0: httpx.HTTPTransport = make(**kw, socket_options=_NODELAY)
        return t0
    except TypeError:
        t = httpx.HTTPTransport(**kw)
        pool = getattr(t, "_pool", None)
        if pool is not None and hasattr(pool, "_network_backend"):
            pool._network_backend = _NoDelaySync(pool._network_backend)
        return t


def nodelay_async_transport(limits: httpx.Limits | None = None) -> httpx.AsyncHTTPTransport:
    """httpx's async transport with TCP_NODELAY on its connections."""
    kw: dict[str, Any] = {"limits": limits} if limits else {}
    try:
        make: Any = httpx.AsyncHTTPTransport
        t0: httpx.AsyncHTTPTransport = make(**kw, socket_options=_NODELAY)
        return t0
    except TypeError:
        t = httpx.AsyncHTTPTransport(**kw)
        pool = getattr(t, "_pool", None)
        if pool is not None and hasattr(pool, "_network_backend"):
            pool._network_backend = _NoDelayAsync(pool._network_backend)
        return t
