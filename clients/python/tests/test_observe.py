"""The observation contract of the Go clients (clienttest.RunObserve):
usage, runtime stats, the tool list and the live event stream, each on a
server of its own (an empty event store)."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

import svc_client as S
from adapters import SyncOverAsync
from conftest import Server


@pytest.fixture(params=["sync", "async"])
def fx(request: pytest.FixtureRequest, fresh_server: Server) -> Iterator[Any]:
    c = S.Client(fresh_server.url) if request.param == "sync" else SyncOverAsync(fresh_server.url)
    yield c
    c.close()


def run_echo(c: Any, value: Any, trace: str | None = None) -> dict[str, Any]:
    res: dict[str, Any] = c.run("echo", {"input": value}, request_id=trace)
    assert res["success"], res
    return res


def settled(c: Any, invocations: int) -> dict[str, Any]:
    """Usage once the store emitter has written the events (it batches)."""
    deadline = time.monotonic() + 10
    while True:
        u: dict[str, Any] = c.usage()
        if u["total"]["invocations"] >= invocations or time.monotonic() > deadline:
            return u
        time.sleep(0.02)


def same_cost(got: float, want: float) -> bool:
    return abs(got - want) <= 2e-9


def test_usage(fx: Any) -> None:
    a = run_echo(fx, "one two three")
    b = run_echo(fx, "four")
    cl = fx.run("clock", {"input": "five six"})
    assert cl["success"]
    u = settled(fx, 3)
    want = sum(r["metadata"]["tokens_used"] for r in (a, b, cl))
    assert want > 0
    assert u["total"]["tokens_used"] == want and u["total"]["invocations"] == 3
    costs = {"echo": a["metadata"]["cost_usd"] + b["metadata"]["cost_usd"], "clock": cl["metadata"]["cost_usd"]}
    assert all(v > 0 for v in costs.values()), "the fixture prices test:echo (tests/prices.yaml)"
    by_agent = fx.usage("agent")
    for agent, cost in costs.items():
        assert same_cost(by_agent["groups"][agent]["cost_usd"], cost)
    assert same_cost(by_agent["total"]["cost_usd"], sum(costs.values()))
    by_model = fx.usage("model")
    assert same_cost(by_model["groups"]["test:echo"]["cost_usd"], sum(costs.values()))
    assert fx.usage("none")["total"]["cost_usd"] == by_agent["total"]["cost_usd"]
    by_trace = fx.usage("trace")
    assert len(by_trace["groups"]) == 3
    assert by_trace["groups"][a["metadata"]["trace_id"]]["tokens_used"] == a["metadata"]["tokens_used"]
    assert same_cost(by_trace["groups"][b["metadata"]["trace_id"]]["cost_usd"], b["metadata"]["cost_usd"])


def test_usage_tokens(fx: Any) -> None:
    a = run_echo(fx, "one two three")
    b = run_echo(fx, "four")
    u = settled(fx, 2)
    want = a["metadata"]["tokens_used"] + b["metadata"]["tokens_used"]
    assert u["total"]["tokens_used"] == want and u["total"]["invocations"] == 2
    assert fx.usage("agent")["groups"]["echo"]["tokens_used"] == want
    assert fx.usage("model")["groups"]["test:echo"]["tokens_used"] == want
    by_trace = fx.usage("trace")
    assert len(by_trace["groups"]) == 2
    assert by_trace["groups"][a["metadata"]["trace_id"]]["tokens_used"] == a["metadata"]["tokens_used"]


def test_usage_bad_group_by(fx: Any) -> None:
    with pytest.raises(S.SpecValidationError) as ei:
        fx.usage("planet")
    assert ei.value.status == 400


def test_runtime_stats(fx: Any) -> None:
    run_echo(fx, "x")
    assert not fx.run("fail", {"input": "y"})["success"]
    deadline = time.monotonic() + 10
    while True:
        st = fx.runtime_stats()
        h = st["header"]
        if (h["agents_completed"], h["agents_failed"]) == (1, 1) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert h["agents_completed"] == 1 and h["agents_failed"] == 1 and h["error_rate"] == 0.5
    assert st["error_groups"] and st["error_groups"][0]["count"] == 1
    assert isinstance(st["rejections"], dict) and isinstance(st["tool_servers"], list) and isinstance(st["workers"], list)


def test_list_tools(fx: Any) -> None:
    ds = fx.tools()
    assert any(d["name"] == "current_time" and "clock" in d["agents"] for d in ds)
    for d in ds:
        assert d["name"] and d["input_schema"] and d["source"] and d["agents"]


def follow(c: Any, trigger: Any, want: Any, **filters: Any) -> list[dict[str, Any]]:
    """Reads the event stream on a thread while trigger() runs every 200 ms,
    until an event matches want."""
    seen: list[dict[str, Any]] = []
    found = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for ev in c.stream_events(max_duration=30, **filters):
                seen.append(ev)
                if want(ev):
                    found.set()
                    return
        except BaseException as e:  # reported below
            errors.append(e)

    th = threading.Thread(target=read)
    th.start()
    deadline = time.monotonic() + 30
    while not found.is_set() and th.is_alive() and time.monotonic() < deadline:
        trigger()
        found.wait(0.2)
    th.join(35)
    assert not errors, errors
    assert found.is_set(), f"no matching event; saw {len(seen)}"
    return seen


def test_stream_events(fx: Any) -> None:
    spawned: set[str] = set()
    n = [0]

    def trigger() -> None:
        n[0] += 1
        run_echo(fx, "hi", f"stream-{time.time_ns()}-{n[0]}")

    def want(ev: dict[str, Any]) -> bool:
        if ev["event_type"] == "agent_spawned" and ev["agent_name"] == "echo":
            spawned.add(ev["trace_id"])
        return ev["event_type"] == "agent_completed" and ev["trace_id"] in spawned

    for ev in follow(fx, trigger, want):
        assert ev["timestamp"] and ev["payload"] is not None and ev["trace_id"]


def test_stream_events_filtered(fx: Any) -> None:
    def trigger() -> None:
        run_echo(fx, "noise")
        fx.run("fail", {"input": "x"})

    seen = follow(fx, trigger, lambda ev: ev["event_type"] == "agent_failed",
                  event_types=["agent_failed"], agent="fail")
    for ev in seen:
        assert ev["event_type"] == "agent_failed" and ev["agent_name"] == "fail"


def test_stream_events_stops(fx: Any) -> None:
    start = time.monotonic()
    evs = list(fx.stream_events(event_types="worker_stopped", max_duration=0.3))
    assert evs == [], "worker_stopped from a runtime with no workers"
    assert 0.3 <= time.monotonic() - start < 5


def test_list_runs(fx: Any) -> None:
    ids = [fx.submit("echo", {"input": i}).run_id for i in range(3)]
    for i in ids:
        fx.run_handle(i).result()
    page = fx.list_runs(limit=2)
    assert [r["run_id"] for r in page["runs"]] == ids[::-1][:2], "newest first"
    rest = fx.list_runs(limit=2, cursor=page["next_cursor"])
    assert [r["run_id"] for r in rest["runs"]] == ids[:1]
    assert {r["run_id"] for r in fx.list_runs(state="completed")["runs"]} == set(ids)


def test_events_and_tree(fx: Any) -> None:
    """GET /events filtered by trace and type, and the trace's tree, as the
    Go client's Events and Tree read them."""
    a = run_echo(fx, "one", trace="trace-py-a")
    run_echo(fx, "two", trace="trace-py-b")
    settled(fx, 2)
    evs = fx.events(trace_id="trace-py-a")
    assert evs and all(e["trace_id"] == "trace-py-a" for e in evs), evs
    assert {e["event_type"] for e in evs} >= {"agent_spawned", "agent_completed"}, evs
    done = fx.events(event_type="agent_completed", limit=1)
    assert len(done) == 1 and done[0]["trace_id"] == "trace-py-b", "newest first, limited"
    assert fx.events(since="2999-01-01T00:00:00Z") == []
    tree = fx.tree("trace-py-a")
    assert tree["trace_id"] == "trace-py-a", tree
    assert "echo" in str(tree) and a["metadata"]["trace_id"] == "trace-py-a"
    with pytest.raises(S.RegistryError):
        fx.tree("no-such-trace")
    with pytest.raises(S.SpecValidationError):
        fx.events(event_type="no_such_type")


def test_windows_and_history(fx: Any) -> None:
    """since and until window the rollups (a datetime, RFC 3339 or a
    duration before now); the run history lists a synchronous run beside
    the submitted ones, filtered, with its total; bad values are 400s
    naming the parameter."""
    from datetime import datetime, timedelta, timezone

    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    run_echo(fx, "one two", trace="py-hist-1")
    settled(fx, 1)
    assert fx.usage("agent", since=start)["total"]["invocations"] == 1
    assert fx.usage("agent", until=start)["total"]["invocations"] == 0
    assert fx.usage("none", since="1h")["total"]["invocations"] == 1
    assert fx.runtime_stats(since=start)["header"]["agents_completed"] == 1
    assert fx.runtime_stats(until=start.replace(tzinfo=None))["header"]["agents_completed"] == 0
    assert fx.tool_usage("tool", since="10m")["rows"] == []
    page = fx.list_runs(status="completed", target="echo", run_type="run")
    assert page["total"] == 1
    row = page["runs"][0]
    assert (row["trace_id"], row["type"], row["status"], row["run_id"]) == ("py-hist-1", "run", "completed", "")
    assert fx.list_runs(run_type="submitted")["runs"] == []
    with pytest.raises(S.SpecValidationError, match="since"):
        fx.usage("agent", since="yesterday")
    with pytest.raises(S.SpecValidationError, match="status"):
        fx.list_runs(status="done")
