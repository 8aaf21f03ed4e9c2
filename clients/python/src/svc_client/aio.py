"""The asyncio client: the same calls as Client, awaited. Cancelling the
task that awaits one (asyncio.timeout, task.cancel()) ends its request;
leaving an ``async for`` over a stream closes its connection."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any, AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence

import httpx

from . import errors as E
from ._base import NO_ANSWER, UNSET, Timeout, _Base, nodelay_async_transport, transport_error
from ._duplex import gather_stream_async
from ._wire import (
    DEFAULT_GATHER_CONCURRENCY,
    DEFAULT_TIMEOUT,
    POLL_MAX,
    POLL_START,
    STREAM_RETRIES,
    STREAM_RETRY_DELAY,
    TERMINAL_STATES,
    GatherItem,
    SSEParser,
    decode_event,
    encode_task,
    seg,
)


class AsyncClient(_Base):
    """The asyncio twin of Client. ``limits`` sets httpx's connection pool
    (by default up to 100 connections, as httpx's)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        super().__init__(url, token=token, timeout=timeout)
        self._http = httpx.AsyncClient(transport=transport or nodelay_async_transport(limits), timeout=self._timeout,
                                       trust_env=False)

    async def aclose(self) -> None:
        """Closes the client's connections; nothing stops on the server."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, *, json_body: Any = None, headers: Mapping[str, str] | None = None,
                    timeout: Timeout = UNSET) -> Any:
        try:
            resp = await self._http.request(
                method, self._base + path, json=json_body,
                headers=self._headers(headers, body=json_body is not None), timeout=self._to(timeout),
            )
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        if not 200 <= resp.status_code <= 299:
            self._raise_for(resp, resp.content)
        return self._decode(resp, method, path)

    async def _sse(self, path: str, headers: Mapping[str, str] | None = None,
                   read_timeout: float | None = None) -> AsyncIterator[tuple[str, str, str | None]]:
        to = httpx.Timeout(self._timeout, read=read_timeout)
        async with self._http.stream("GET", self._base + path, timeout=to,
                                     headers=self._headers(headers, accept="text/event-stream, application/problem+json")) as resp:
            if not 200 <= resp.status_code <= 299:
                self._raise_for(resp, await resp.aread())
            self._check_stream(resp, "GET", path)
            p = SSEParser()
            async for line in resp.aiter_lines():
                frame = p.feed(line)
                if frame is not None:
                    yield frame
            frame = p.feed("")
            if frame is not None:
                yield frame

    async def health(self, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /healthz."""
        out: dict[str, Any] = await self._call("GET", "/healthz", timeout=timeout)
        return out

    async def ready(self, *, timeout: Timeout = UNSET) -> None:
        """GET /readyz; ShuttingDownError while the server shuts down."""
        await self._call("GET", "/readyz", timeout=timeout)

    async def agents(self, *, timeout: Timeout = UNSET) -> list[str]:
        out: list[str] = await self._call("GET", "/agents", timeout=timeout)
        return out

    async def groups(self, *, timeout: Timeout = UNSET) -> list[str]:
        out: list[str] = await self._call("GET", "/groups", timeout=timeout)
        return out

    async def agent_schema(self, name: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", f"/agents/{seg(name)}/schema", timeout=timeout)
        return out

    async def group_topology(self, name: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", f"/groups/{seg(name)}/topology", timeout=timeout)
        return out

    async def run(self, agent: str, task: Mapping[str, Any], *, request_id: str | None = None,
                  timeout: Timeout = UNSET) -> dict[str, Any]:
        """See Client.run."""
        path, body, rid = self._run_req("agents", agent, task, request_id)
        out: dict[str, Any] = await self._call("POST", path, json_body=body, headers={"X-Request-Id": rid}, timeout=timeout)
        return out

    async def run_stream(self, agent: str, task: Mapping[str, Any], *,
                         request_id: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """See Client.run_stream."""
        path, body, rid = self._run_req("agents", agent, task, request_id)
        headers = self._headers({"X-Request-Id": rid}, body=True, accept="text/event-stream, application/problem+json")
        try:
            async with self._http.stream("POST", self._base + path, json=body, headers=headers,
                                         timeout=httpx.Timeout(self._timeout, read=None)) as resp:
                if not 200 <= resp.status_code <= 299:
                    self._raise_for(resp, await resp.aread())
                self._check_stream(resp, "POST", path)
                p = SSEParser()
                async for line in resp.aiter_lines():
                    frame = p.feed(line)
                    if frame is not None:
                        out = self._stream_frame(frame[0], frame[1])
                        if out is not None:
                            yield out
                            if out["type"] == "result":
                                return
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        raise E.AgentRuntimeError(f"client: POST {path}: the event stream ended without a result")

    async def gather(self, agent: str, tasks: Iterable[Mapping[str, Any]], *,
                     max_concurrency: int = DEFAULT_GATHER_CONCURRENCY, request_id: str | None = None,
                     timeout: Timeout = UNSET) -> list[dict[str, Any]]:
        """See Client.gather."""
        path, body = self._gather_req(agent, tasks, max_concurrency)
        out: list[dict[str, Any]] = await self._call("POST", path, json_body=body,
                                                     headers={"X-Request-Id": request_id} if request_id else None, timeout=timeout)
        if not isinstance(out, list) or len(out) != len(body["tasks"]):
            raise E.AgentRuntimeError(f"client: gather on {agent!r}: the server returned a wrong count of results for {len(body['tasks'])} tasks")
        return out

    def gather_stream(self, agent: str, tasks: Iterable[Any] | AsyncIterable[Any], *,
                      max_concurrency: int = DEFAULT_GATHER_CONCURRENCY,
                      request_id: str | None = None) -> AsyncIterator[GatherItem]:
        """See Client.gather_stream; tasks may be an async iterable too."""
        path, headers, ahead = self._stream_req(agent, max_concurrency, request_id)
        return gather_stream_async(self._base, path, headers, tasks, self._timeout, ahead)

    async def run_group(self, group: str, task: Mapping[str, Any], *, request_id: str | None = None,
                        timeout: Timeout = UNSET) -> dict[str, Any]:
        """See Client.run_group."""
        path, body, rid = self._run_req("groups", group, task, request_id)
        out: dict[str, Any] = self._group_result(
            await self._call("POST", path, json_body=body, headers={"X-Request-Id": rid}, timeout=timeout), group)
        return out

    async def submit(self, target: str, task: Mapping[str, Any], *, kind: str | None = None,
                     idempotency_key: str | None = None, request_id: str | None = None,
                     callback_url: str | None = None, timeout: Timeout = UNSET) -> AsyncRunHandle:
        """See Client.submit."""
        body, headers, _ = self._submit_req(target, task, kind, idempotency_key, request_id, callback_url)
        reply = await self._call("POST", "/submit", json_body=body, headers=headers, timeout=timeout)
        if not isinstance(reply, dict) or not reply.get("run_id"):
            raise E.AgentRuntimeError(f"client: submit of {target!r}: the server returned no run_id")
        return AsyncRunHandle(self, reply["run_id"], target)

    def run_handle(self, run_id: str, target: str = "") -> AsyncRunHandle:
        return AsyncRunHandle(self, run_id, target)

    async def run_status(self, run_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", f"/runs/{seg(run_id)}/status", timeout=timeout)
        return out

    async def run_result(self, run_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", f"/runs/{seg(run_id)}/result", timeout=timeout)
        return out

    async def cancel_run(self, run_id: str, *, timeout: Timeout = UNSET) -> None:
        await self._call("POST", f"/runs/{seg(run_id)}/cancel", timeout=timeout)

    async def resume_run(self, run_id: str, request_id: str, *, approve: bool | None = None, reason: str | None = None,
                         answer: Any = NO_ANSWER, timeout: Timeout = UNSET) -> dict[str, Any]:
        """See Client.resume_run."""
        path, body = self._resume_req(run_id, request_id, approve, reason, answer)
        out: dict[str, Any] = await self._call("POST", path, json_body=body, timeout=timeout)
        return out

    async def run_events(self, run_id: str, *, after: int = 0, deltas: bool = False) -> AsyncIterator[dict[str, Any]]:
        """See Client.run_events."""
        if after < 0:
            raise E.SpecValidationError(f"client: events after {after}: want a non-negative sequence number")
        path = f"/runs/{seg(run_id)}/stream" + ("?deltas=true" if deltas else "")
        failures = 0
        while True:
            headers = {"Last-Event-ID": str(after)} if after > 0 else None
            try:
                async for _, data, fid in self._sse(path, headers):
                    ev = decode_event(data, "type")
                    if ev is None:
                        continue
                    if not ev.get("seq") and ev.get("type") != "delta" and fid and fid.isdigit():
                        ev["seq"] = int(fid)
                    if ev.get("type") != "delta":
                        after = int(ev.get("seq") or after)
                    failures = 0
                    yield ev
                return
            except httpx.HTTPError as e:
                failures += 1
                if isinstance(e, httpx.TimeoutException) or failures > STREAM_RETRIES:
                    raise transport_error(e) from e
                await asyncio.sleep(STREAM_RETRY_DELAY * failures)

    async def stream_events(self, *, event_types: str | Sequence[str] | None = None, agent: str | None = None,
                            max_duration: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """See Client.stream_events."""
        types = [event_types] if isinstance(event_types, str) else list(event_types or [])
        path = "/events/stream" + self._query({"event_type": types or None, "agent": agent})
        deadline = None if max_duration is None else time.monotonic() + max_duration
        failures = 0
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                async for _, data, _ in self._sse(path, read_timeout=left):
                    ev = decode_event(data, "event_type")
                    if ev is None:
                        continue
                    failures = 0
                    yield ev
                    if deadline is not None and time.monotonic() >= deadline:
                        return
            except httpx.ReadTimeout as e:
                if deadline is not None and time.monotonic() >= deadline - 0.01:
                    return
                raise transport_error(e) from e
            except httpx.HTTPError as e:
                failures += 1
                if isinstance(e, httpx.TimeoutException) or failures > STREAM_RETRIES:
                    raise transport_error(e) from e
                await asyncio.sleep(STREAM_RETRY_DELAY * failures)
                continue
            # The server ended the stream (a restart, a proxy): reopen it.
            await asyncio.sleep(STREAM_RETRY_DELAY)

    async def usage(self, group_by: str | None = None, *, since: str | datetime | None = None, until: str | datetime | None = None,
              timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", "/usage" + self._query(
            {"group_by": group_by, "since": self._when(since), "until": self._when(until)}), timeout=timeout)
        return out

    async def tools(self, *, timeout: Timeout = UNSET) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = await self._call("GET", "/tools", timeout=timeout)
        return out

    async def tool_usage(self, group_by: str = "tool", *, since: str | datetime | None = None, until: str | datetime | None = None,
                   timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", "/tools" + self._query(
            {"group_by": group_by, "since": self._when(since), "until": self._when(until)}), timeout=timeout)
        return out

    async def runtime_stats(self, *, since: str | datetime | None = None, until: str | datetime | None = None,
                      timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", "/runtime/stats" + self._query(
            {"since": self._when(since), "until": self._when(until)}), timeout=timeout)
        return out

    async def events(self, *, event_type: str | None = None, trace_id: str | None = None, since: str | None = None,
                     until: str | None = None, limit: int | None = None, timeout: Timeout = UNSET) -> list[dict[str, Any]]:
        """GET /events; see Client.events."""
        out: list[dict[str, Any]] = await self._call("GET", "/events" + self._query(
            {"event_type": event_type, "trace_id": trace_id, "since": self._when(since), "until": self._when(until), "limit": limit}), timeout=timeout)
        return out

    async def tree(self, trace_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /runs/{trace_id}/tree; see Client.tree."""
        out: dict[str, Any] = await self._call("GET", f"/runs/{seg(trace_id)}/tree", timeout=timeout)
        return out

    async def list_runs(self, *, state: str | None = None, status: str | None = None, target: str | None = None,
                  run_type: str | None = None, limit: int | None = None, cursor: str | None = None,
                        timeout: Timeout = UNSET) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", "/runs" + self._query(
            {"state": state, "status": status, "target": target, "type": run_type, "limit": limit, "cursor": cursor}), timeout=timeout)
        return out

    # --- batches ----------------------------------------------------------

    async def submit_batch(self, target: str, tasks: Iterable[Any] | AsyncIterable[Any], *,
                           max_concurrency: int = DEFAULT_GATHER_CONCURRENCY, mode: str | None = None,
                           callback_url: str | None = None, timeout: Timeout = None) -> dict[str, Any]:
        """POST /batches; see Client.submit_batch. tasks may be async."""
        path, headers = self._batch_req(target, max_concurrency, mode, callback_url)

        async def lines() -> AsyncIterator[bytes]:
            i = 0
            if isinstance(tasks, AsyncIterable):
                async for t in tasks:
                    yield encode_task(i, t)[0]
                    i += 1
            else:
                for t in tasks:
                    yield encode_task(i, t)[0]
                    i += 1

        try:
            resp = await self._http.post(self._base + path, content=lines(), headers=headers, timeout=self._to(timeout))
        except httpx.HTTPError as e:
            try:
                again = await self._http.post(self._base + path, content=b"", headers=headers, timeout=self._to(UNSET))
            except httpx.HTTPError:
                raise transport_error(e) from e
            if not 200 <= again.status_code <= 299:
                self._raise_for(again, again.content)
            raise transport_error(e) from e
        if not 200 <= resp.status_code <= 299:
            self._raise_for(resp, resp.content)
        out: dict[str, Any] = self._decode(resp, "POST", "/batches")
        return out

    async def batch_status(self, batch_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /batches/{id}."""
        out: dict[str, Any] = await self._call("GET", f"/batches/{seg(batch_id)}", timeout=timeout)
        return out

    async def cancel_batch(self, batch_id: str, *, timeout: Timeout = UNSET) -> None:
        """POST /batches/{id}/cancel."""
        await self._call("POST", f"/batches/{seg(batch_id)}/cancel", timeout=timeout)

    async def list_batches(self, *, limit: int | None = None, cursor: str | None = None,
                           timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /batches."""
        out: dict[str, Any] = await self._call("GET", "/batches" + self._query({"limit": limit, "cursor": cursor}), timeout=timeout)
        return out

    async def batch_results(self, batch_id: str, *, order: str | None = None, after: int | None = None,
                            follow: bool = False) -> AsyncIterator[dict[str, Any]]:
        """GET /batches/{id}/results; see Client.batch_results."""
        path = self._results_req(batch_id, order, after, follow)
        to = httpx.Timeout(self._timeout, read=None)
        try:
            async with self._http.stream("GET", self._base + path, timeout=to,
                                         headers=self._headers(accept="application/x-ndjson, application/problem+json")) as resp:
                if not 200 <= resp.status_code <= 299:
                    self._raise_for(resp, await resp.aread())
                async for line in resp.aiter_lines():
                    item = self._result_line(line)
                    if item is not None:
                        yield item
        except httpx.HTTPError as e:
            raise transport_error(e) from e


class AsyncRunHandle:
    """A submitted run, for AsyncClient; see RunHandle."""

    def __init__(self, client: AsyncClient, run_id: str, target: str = "") -> None:
        self._c = client
        self.run_id = run_id
        self.target = target

    def __repr__(self) -> str:
        return f"AsyncRunHandle({self.run_id!r})"

    async def status(self, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        return await self._c.run_status(self.run_id, timeout=timeout)

    async def result(self, *, timeout: float | None = None) -> dict[str, Any]:
        """See RunHandle.result."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = POLL_START
        while True:
            st = await self._c.run_status(self.run_id)
            if st.get("state") in TERMINAL_STATES:
                return await self._c.run_result(self.run_id)
            if deadline is not None and time.monotonic() + delay > deadline:
                raise E.TimeoutError(f"client: run {self.run_id} still {st.get('state')} after {timeout} s")
            await asyncio.sleep(delay)
            delay = min(2 * delay, POLL_MAX)

    async def resume(self, request_id: str, *, approve: bool | None = None, reason: str | None = None,
                     answer: Any = NO_ANSWER, timeout: Timeout = UNSET) -> dict[str, Any]:
        """See RunHandle.resume."""
        return await self._c.resume_run(self.run_id, request_id, approve=approve, reason=reason, answer=answer, timeout=timeout)

    async def cancel(self, *, timeout: Timeout = UNSET) -> None:
        await self._c.cancel_run(self.run_id, timeout=timeout)

    def events(self, *, after: int = 0, deltas: bool = False) -> AsyncIterator[dict[str, Any]]:
        return self._c.run_events(self.run_id, after=after, deltas=deltas)
