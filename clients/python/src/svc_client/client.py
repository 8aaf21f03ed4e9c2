"""The synchronous client."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Iterable, Iterator, Mapping, Sequence

import httpx

from . import errors as E
from ._base import NO_ANSWER, UNSET, Timeout, _Base, nodelay_transport, transport_error
from ._duplex import GatherStream
from ._wire import (
    DEFAULT_GATHER_CONCURRENCY,
    DEFAULT_TIMEOUT,
    POLL_MAX,
    POLL_START,
    STREAM_RETRIES,
    STREAM_RETRY_DELAY,
    TERMINAL_STATES,
    SSEParser,
    decode_event,
    seg,
)


class Client(_Base):
    """A client of an svc server (``svc serve``, or a host that mounts its
    router). Safe to share between threads; close it (or use ``with``) to
    close its connections.

    ``timeout`` bounds each call, in seconds (None or 0: no bound); every
    call takes its own ``timeout=`` too. Streams (gather_stream, events,
    stream_events) are bounded by the connect timeout only: they last as
    long as what they follow; stop one by leaving the loop.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token=token, timeout=timeout)
        self._http = httpx.Client(transport=transport or nodelay_transport(), timeout=self._timeout, trust_env=False)

    def close(self) -> None:
        """Closes the client's connections; nothing stops on the server."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -------------------------------------------------------

    def _call(self, method: str, path: str, *, json_body: Any = None, headers: Mapping[str, str] | None = None,
              timeout: Timeout = UNSET) -> Any:
        try:
            resp = self._http.request(
                method, self._base + path, json=json_body,
                headers=self._headers(headers, body=json_body is not None), timeout=self._to(timeout),
            )
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        if not 200 <= resp.status_code <= 299:
            self._raise_for(resp, resp.content)
        return self._decode(resp, method, path)

    def _sse(self, path: str, headers: Mapping[str, str] | None = None, read_timeout: float | None = None) -> Iterator[tuple[str, str, str | None]]:
        """The frames of an event stream; transport errors are httpx's."""
        to = httpx.Timeout(self._timeout, read=read_timeout)
        with self._http.stream("GET", self._base + path, timeout=to,
                               headers=self._headers(headers, accept="text/event-stream, application/problem+json")) as resp:
            if not 200 <= resp.status_code <= 299:
                self._raise_for(resp, resp.read())
            self._check_stream(resp, "GET", path)
            p = SSEParser()
            for line in resp.iter_lines():
                frame = p.feed(line)
                if frame is not None:
                    yield frame
            frame = p.feed("")
            if frame is not None:
                yield frame

    # --- agents and groups ----------------------------------------------

    def health(self, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /healthz: ``{"status": "ok"}`` while the server lives."""
        out: dict[str, Any] = self._call("GET", "/healthz", timeout=timeout)
        return out

    def ready(self, *, timeout: Timeout = UNSET) -> None:
        """GET /readyz: returns when the server takes traffic; raises
        ShuttingDownError while it shuts down."""
        self._call("GET", "/readyz", timeout=timeout)

    def agents(self, *, timeout: Timeout = UNSET) -> list[str]:
        """The registered agents' names, sorted."""
        out: list[str] = self._call("GET", "/agents", timeout=timeout)
        return out

    def groups(self, *, timeout: Timeout = UNSET) -> list[str]:
        """The registered groups' names, sorted."""
        out: list[str] = self._call("GET", "/groups", timeout=timeout)
        return out

    def agent_schema(self, name: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """The JSON Schemas of an agent's input and output: ``{name, input, output}``."""
        out: dict[str, Any] = self._call("GET", f"/agents/{seg(name)}/schema", timeout=timeout)
        return out

    def group_topology(self, name: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """A group's nodes, edges, entry and terminal nodes and Mermaid chart."""
        out: dict[str, Any] = self._call("GET", f"/groups/{seg(name)}/topology", timeout=timeout)
        return out

    def run(self, agent: str, task: Mapping[str, Any], *, request_id: str | None = None,
            timeout: Timeout = UNSET) -> dict[str, Any]:
        """Runs task (``{"input": ..., "id"?, "request_id"?, "metadata"?,
        "token_budget"?}``) on the agent and returns its AgentResult. A run
        that failed inside is a result with ``success`` False, not an error.
        The request id (the task's, else request_id, else a new UUIDv7)
        becomes the run's trace id."""
        path, body, rid = self._run_req("agents", agent, task, request_id)
        out: dict[str, Any] = self._call("POST", path, json_body=body, headers={"X-Request-Id": rid}, timeout=timeout)
        return out

    def run_stream(self, agent: str, task: Mapping[str, Any], *, request_id: str | None = None) -> Iterator[dict[str, Any]]:
        """A run answered as it is written (token streaming): yields
        ``{"type": "delta", "agent", "task_id", "span_id", "index", "text"}``
        for each fragment of the answer, then ``{"type": "result",
        "result": AgentResult}``. A run that fails before it has a result
        raises what run() raises. Leaving the loop early closes the
        connection, which cancels the run. A delta with index 0 after
        others starts the answer again (a retry, the fallback model)."""
        path, body, rid = self._run_req("agents", agent, task, request_id)
        headers = self._headers({"X-Request-Id": rid}, body=True, accept="text/event-stream, application/problem+json")
        try:
            with self._http.stream("POST", self._base + path, json=body, headers=headers,
                                   timeout=httpx.Timeout(self._timeout, read=None)) as resp:
                if not 200 <= resp.status_code <= 299:
                    self._raise_for(resp, resp.read())
                self._check_stream(resp, "POST", path)
                p = SSEParser()
                for line in resp.iter_lines():
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

    def gather(self, agent: str, tasks: Iterable[Mapping[str, Any]], *,
               max_concurrency: int = DEFAULT_GATHER_CONCURRENCY, request_id: str | None = None,
               timeout: Timeout = UNSET) -> list[dict[str, Any]]:
        """Runs each task on the agent, at most max_concurrency at once
        (1..10000), and returns the results in task order. request_id
        becomes the batch's trace id (a task's own request_id wins)."""
        path, body = self._gather_req(agent, tasks, max_concurrency)
        out: list[dict[str, Any]] = self._call("POST", path, json_body=body,
                                               headers={"X-Request-Id": request_id} if request_id else None, timeout=timeout)
        if not isinstance(out, list) or len(out) != len(body["tasks"]):
            raise E.AgentRuntimeError(f"client: gather on {agent!r}: the server returned {len(out) if isinstance(out, list) else out!r} results for {len(body['tasks'])} tasks")
        return out

    def gather_stream(self, agent: str, tasks: Iterable[Mapping[str, Any] | Any], *,
                      max_concurrency: int = DEFAULT_GATHER_CONCURRENCY,
                      request_id: str | None = None) -> GatherStream:
        """The streamed gather: tasks are read from any iterable as the
        server takes them (a generator of a million is fine: neither end
        holds the batch) and the results come as they finish, each a
        GatherItem(index, result). An InvalidTask item, or one that cannot
        be encoded, fails as its own result. Leaving the loop cancels the
        rest, and so does the stream's cancel() from another thread (the
        loop then raises CancelledError). A rejection of the whole batch
        raises before any result; a stream cut before its summary raises
        AgentRuntimeError."""
        path, headers, ahead = self._stream_req(agent, max_concurrency, request_id)
        return GatherStream(self._base, path, headers, tasks, self._timeout, ahead)

    def run_group(self, group: str, task: Mapping[str, Any], *, request_id: str | None = None,
                  timeout: Timeout = UNSET) -> dict[str, Any]:
        """Runs a group on one task: the AgentResult when one terminal node
        fired, a GroupResult (``group`` True, ``outputs`` by node) when
        several did."""
        path, body, rid = self._run_req("groups", group, task, request_id)
        out: dict[str, Any] = self._group_result(
            self._call("POST", path, json_body=body, headers={"X-Request-Id": rid}, timeout=timeout), group)
        return out

    # --- submitted runs -------------------------------------------------

    def submit(self, target: str, task: Mapping[str, Any], *, kind: str | None = None,
               idempotency_key: str | None = None, request_id: str | None = None,
               callback_url: str | None = None, timeout: Timeout = UNSET) -> RunHandle:
        """Submits a run of an agent or a group (kind "agent" or "group" is
        needed only when a name is both) and returns its handle at once."""
        body, headers, _ = self._submit_req(target, task, kind, idempotency_key, request_id, callback_url)
        reply = self._call("POST", "/submit", json_body=body, headers=headers, timeout=timeout)
        if not isinstance(reply, dict) or not reply.get("run_id"):
            raise E.AgentRuntimeError(f"client: submit of {target!r}: the server returned no run_id")
        return RunHandle(self, reply["run_id"], target)

    def run_handle(self, run_id: str, target: str = "") -> RunHandle:
        """The handle of a run submitted before, by this client or another."""
        return RunHandle(self, run_id, target)

    def run_status(self, run_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /runs/{id}/status: state and progress."""
        out: dict[str, Any] = self._call("GET", f"/runs/{seg(run_id)}/status", timeout=timeout)
        return out

    def run_result(self, run_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /runs/{id}/result: the stored result; RunStateError before
        the end and for a cancelled run."""
        out: dict[str, Any] = self._call("GET", f"/runs/{seg(run_id)}/result", timeout=timeout)
        return out

    def cancel_run(self, run_id: str, *, timeout: Timeout = UNSET) -> None:
        """Cancels a run (idempotent; a finished run is left as it is)."""
        self._call("POST", f"/runs/{seg(run_id)}/cancel", timeout=timeout)

    def resume_run(self, run_id: str, request_id: str, *, approve: bool | None = None, reason: str | None = None,
                   answer: Any = NO_ANSWER, timeout: Timeout = UNSET) -> dict[str, Any]:
        """POST /runs/{id}/resume: answers one request of a waiting run
        and starts the run again; returns its status. request_id is the
        waiting request's id (the run's status lists its open requests
        under "waiting"; a run_waiting event carries one as "request").
        An approval takes approve (True or False, with an optional reason
        the model sees with a denial); a question (ask_human) takes answer,
        any JSON value, None included. A run that is not waiting, or a
        request that is unknown or already answered, raises RunStateError
        (409); a decision that does not fit its request SpecValidationError
        (400), and the run waits on."""
        path, body = self._resume_req(run_id, request_id, approve, reason, answer)
        out: dict[str, Any] = self._call("POST", path, json_body=body, timeout=timeout)
        return out

    def run_events(self, run_id: str, *, after: int = 0, deltas: bool = False) -> Iterator[dict[str, Any]]:
        """A run's events with a seq above after: history, then live,
        ending after its terminal event. A connection that breaks before
        the end is reopened with Last-Event-ID set to the last event seen
        (up to 5 times in a row), so nothing is lost or repeated. With
        deltas, the run's answer fragments (type "delta", seq 0) come too
        while it runs (a reconnect does not repeat them)."""
        if after < 0:
            raise E.SpecValidationError(f"client: events after {after}: want a non-negative sequence number")
        path = f"/runs/{seg(run_id)}/stream" + ("?deltas=true" if deltas else "")
        failures = 0
        while True:
            headers = {"Last-Event-ID": str(after)} if after > 0 else None
            try:
                for _, data, fid in self._sse(path, headers):
                    ev = decode_event(data, "type")
                    if ev is None:
                        continue
                    if not ev.get("seq") and ev.get("type") != "delta" and fid and fid.isdigit():
                        ev["seq"] = int(fid)
                    if ev.get("type") != "delta":
                        after = int(ev.get("seq") or after)
                    failures = 0
                    yield ev
                return  # the server ended the stream: the run is over
            except httpx.HTTPError as e:
                failures += 1
                if isinstance(e, httpx.TimeoutException) or failures > STREAM_RETRIES:
                    raise transport_error(e) from e
                time.sleep(STREAM_RETRY_DELAY * failures)

    # --- observation ----------------------------------------------------

    def stream_events(self, *, event_types: str | Sequence[str] | None = None, agent: str | None = None,
                      max_duration: float | None = None) -> Iterator[dict[str, Any]]:
        """The runtime's events as they happen (GET /events/stream), with
        the filters; malformed frames are skipped, and a dropped connection
        is reopened (events in the gap are missed: this stream has no
        history). It ends when the loop does, or quietly after
        max_duration seconds."""
        types = [event_types] if isinstance(event_types, str) else list(event_types or [])
        path = "/events/stream" + self._query({"event_type": types or None, "agent": agent})
        deadline = None if max_duration is None else time.monotonic() + max_duration
        failures = 0
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                for _, data, _ in self._sse(path, read_timeout=left):
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
                time.sleep(STREAM_RETRY_DELAY * failures)
                continue
            # The server ended the stream (a restart, a proxy): reopen it.
            time.sleep(STREAM_RETRY_DELAY)

    def usage(self, group_by: str | None = None, *, since: str | datetime | None = None, until: str | datetime | None = None,
              timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /usage: tokens and cost in total and by "agent", "model",
        "trace" or "none"."""
        out: dict[str, Any] = self._call("GET", "/usage" + self._query(
            {"group_by": group_by, "since": self._when(since), "until": self._when(until)}), timeout=timeout)
        return out

    def tools(self, *, timeout: Timeout = UNSET) -> list[dict[str, Any]]:
        """GET /tools: the registered tools (name, schema, source, agents)."""
        out: list[dict[str, Any]] = self._call("GET", "/tools", timeout=timeout)
        return out

    def tool_usage(self, group_by: str = "tool", *, since: str | datetime | None = None, until: str | datetime | None = None,
                   timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /tools?group_by=: calls, failures and latency per tool
        ("tool") or per agent and tool ("agent_tool")."""
        out: dict[str, Any] = self._call("GET", "/tools" + self._query(
            {"group_by": group_by, "since": self._when(since), "until": self._when(until)}), timeout=timeout)
        return out

    def runtime_stats(self, *, since: str | datetime | None = None, until: str | datetime | None = None,
                      timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /runtime/stats; since and until (a datetime, or RFC 3339,
        Unix milliseconds or a duration before now such as "1h") window
        the event counts, tokens, traces, rejections and error groups."""
        out: dict[str, Any] = self._call("GET", "/runtime/stats" + self._query(
            {"since": self._when(since), "until": self._when(until)}), timeout=timeout)
        return out

    def events(self, *, event_type: str | None = None, trace_id: str | None = None, since: str | None = None,
               until: str | None = None, limit: int | None = None, timeout: Timeout = UNSET) -> list[dict[str, Any]]:
        """GET /events: stored runtime events, newest first, filtered by
        type, trace, and time (since inclusive, until exclusive: RFC 3339)."""
        out: list[dict[str, Any]] = self._call("GET", "/events" + self._query(
            {"event_type": event_type, "trace_id": trace_id, "since": self._when(since), "until": self._when(until), "limit": limit}), timeout=timeout)
        return out

    def tree(self, trace_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /runs/{trace_id}/tree: the trace's invocations as a tree."""
        out: dict[str, Any] = self._call("GET", f"/runs/{seg(trace_id)}/tree", timeout=timeout)
        return out

    def list_runs(self, *, state: str | None = None, status: str | None = None, target: str | None = None,
                  run_type: str | None = None, limit: int | None = None, cursor: str | None = None,
                  timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /runs: the run history, newest first, a page at a time (pass
        the page's next_cursor as cursor for the next one), with its total:
        every top-level run (synchronous runs, gathers and group runs from
        the event store, and submitted runs), filtered by status, target
        and run_type ("run", "gather", "group", "submitted"); with state,
        the submitted runs alone in that state."""
        out: dict[str, Any] = self._call("GET", "/runs" + self._query(
            {"state": state, "status": status, "target": target, "type": run_type, "limit": limit, "cursor": cursor}), timeout=timeout)
        return out

    # --- batches ----------------------------------------------------------

    def submit_batch(self, target: str, tasks: Iterable[Mapping[str, Any] | Any], *,
                     max_concurrency: int = DEFAULT_GATHER_CONCURRENCY, mode: str | None = None,
                     callback_url: str | None = None, timeout: Timeout = None) -> dict[str, Any]:
        """POST /batches: sends the tasks (any iterable, one line each as
        application/x-ndjson) and returns ``{"batch_id", "total"}`` once the
        server has stored every one; it runs them in the background, and a
        server with a persistent store goes on with them after a restart.
        This is what a client that sends its whole body before it reads
        (this one) should use for batches of any size, rather than
        gather_stream. An InvalidTask, or a task that cannot be encoded,
        fails as its own result. The upload is unbounded unless timeout
        says otherwise. mode "provider" sends the model calls to the
        provider's batch API (half price, up to 24 h; only for an agent
        whose run is one model call without tools, else a
        SpecValidationError saying why). callback_url gets one signed POST
        when the batch ends (docs/api.md, Webhooks)."""
        path, headers = self._batch_req(target, max_concurrency, mode, callback_url)
        try:
            resp = self._http.post(self._base + path, content=self._batch_lines(tasks), headers=headers, timeout=self._to(timeout))
        except httpx.HTTPError as e:
            # A refusal (an unknown agent) comes before the body is read
            # and the connection closes under the upload: ask again
            # without tasks for the refusal itself.
            try:
                again = self._http.post(self._base + path, content=b"", headers=headers, timeout=self._to(UNSET))
            except httpx.HTTPError:
                raise transport_error(e) from e
            if not 200 <= again.status_code <= 299:
                self._raise_for(again, again.content)
            raise transport_error(e) from e
        if not 200 <= resp.status_code <= 299:
            self._raise_for(resp, resp.content)
        out: dict[str, Any] = self._decode(resp, "POST", "/batches")
        return out

    def batch_status(self, batch_id: str, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /batches/{id}: state, counts, tokens and cost so far."""
        out: dict[str, Any] = self._call("GET", f"/batches/{seg(batch_id)}", timeout=timeout)
        return out

    def cancel_batch(self, batch_id: str, *, timeout: Timeout = UNSET) -> None:
        """POST /batches/{id}/cancel (idempotent; its stored results stay)."""
        self._call("POST", f"/batches/{seg(batch_id)}/cancel", timeout=timeout)

    def list_batches(self, *, limit: int | None = None, cursor: str | None = None,
                     timeout: Timeout = UNSET) -> dict[str, Any]:
        """GET /batches: batches, newest first, a page at a time."""
        out: dict[str, Any] = self._call("GET", "/batches" + self._query({"limit": limit, "cursor": cursor}), timeout=timeout)
        return out

    def batch_results(self, batch_id: str, *, order: str | None = None, after: int | None = None,
                      follow: bool = False) -> Iterator[dict[str, Any]]:
        """GET /batches/{id}/results: yields ``{"index", "seq", "result"}``
        for each stored result, by index (order "index", the default; after
        is the last index read) or in finish order (order "finish"; after is
        the last seq read). With follow, waits for the results to come
        until the batch ends."""
        path = self._results_req(batch_id, order, after, follow)
        to = httpx.Timeout(self._timeout, read=None)
        try:
            with self._http.stream("GET", self._base + path, timeout=to,
                                   headers=self._headers(accept="application/x-ndjson, application/problem+json")) as resp:
                if not 200 <= resp.status_code <= 299:
                    self._raise_for(resp, resp.read())
                for line in resp.iter_lines():
                    item = self._result_line(line)
                    if item is not None:
                        yield item
        except httpx.HTTPError as e:
            raise transport_error(e) from e


class RunHandle:
    """A submitted run: its id, and the calls that come back for it."""

    def __init__(self, client: Client, run_id: str, target: str = "") -> None:
        self._c = client
        self.run_id = run_id
        self.target = target

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    def status(self, *, timeout: Timeout = UNSET) -> dict[str, Any]:
        """The run's state and progress."""
        return self._c.run_status(self.run_id, timeout=timeout)

    def result(self, *, timeout: float | None = None) -> dict[str, Any]:
        """Waits until the run is terminal (polling its status, 20 ms
        doubling to 500 ms), then returns its AgentResult or GroupResult.
        A cancelled run has none: RunStateError. timeout bounds the whole
        wait (TimeoutError). A waiting run is not terminal: the wait goes
        on until someone resumes it and it ends."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = POLL_START
        while True:
            st = self._c.run_status(self.run_id)
            if st.get("state") in TERMINAL_STATES:
                return self._c.run_result(self.run_id)
            if deadline is not None and time.monotonic() + delay > deadline:
                raise E.TimeoutError(f"client: run {self.run_id} still {st.get('state')} after {timeout} s")
            time.sleep(delay)
            delay = min(2 * delay, POLL_MAX)

    def resume(self, request_id: str, *, approve: bool | None = None, reason: str | None = None,
               answer: Any = NO_ANSWER, timeout: Timeout = UNSET) -> dict[str, Any]:
        """Answers one of the run's waiting requests and resumes it; see
        Client.resume_run."""
        return self._c.resume_run(self.run_id, request_id, approve=approve, reason=reason, answer=answer, timeout=timeout)

    def cancel(self, *, timeout: Timeout = UNSET) -> None:
        """Cancels the run (idempotent)."""
        self._c.cancel_run(self.run_id, timeout=timeout)

    def events(self, *, after: int = 0, deltas: bool = False) -> Iterator[dict[str, Any]]:
        """The run's events; see Client.run_events."""
        return self._c.run_events(self.run_id, after=after, deltas=deltas)
