"""The client contract cases the Go clients run (http/client/clienttest:
Run, RunSubmit, RunObserve), with the same inputs and expected outcomes,
for Client and for AsyncClient, against a real svc serve on the same
fixture (tests/specs)."""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Iterator

import pytest

import svc_client as S
from adapters import SyncOverAsync
from conftest import Server

GROUP_INPUT = {"text": "hello", "n": [1, 2.5, True, None], "nested": {"k": "v"}}
# The contract's bound for calls that must end early (a loaded machine
# included); the slow agent sleeps 10 s.
EARLY = 5.0


def make(kind: str, url: str) -> Any:
    return S.Client(url) if kind == "sync" else SyncOverAsync(url)


@pytest.fixture(params=["sync", "async"])
def c(request: pytest.FixtureRequest, server: Server) -> Iterator[Any]:
    cl = make(request.param, server.url)
    yield cl
    cl.close()


def inputs(n: int) -> list[dict[str, Any]]:
    return [{"id": f"t{i:02d}", "input": {"i": i}} for i in range(n)]


# --- Run ---------------------------------------------------------------


def test_agents(c: Any) -> None:
    names = c.agents()
    assert names == sorted(names)
    assert {"echo", "fail", "slow"} <= set(names) and "nope" not in names


def test_agent_schema(c: Any) -> None:
    s = c.agent_schema("echo")
    assert s["name"] == "echo"
    assert isinstance(s["input"], dict) and isinstance(s["output"], dict)
    with pytest.raises(S.RegistryError):
        c.agent_schema("nope")


@pytest.mark.parametrize("value", [GROUP_INPUT, "just a string", 42, ["a", "b"]])
def test_run_echo(c: Any, value: Any) -> None:
    res = c.run("echo", {"input": value})
    assert res["success"] is True and res["error"] is None
    assert res["output"] == value
    assert res["agent_name"] == "echo"


def test_run_task_id(c: Any) -> None:
    assert c.run("echo", {"id": "task-given", "input": 1})["task_id"] == "task-given"
    a = c.run("echo", {"input": 1})["task_id"]
    b = c.run("echo", {"input": 1})["task_id"]
    assert a and a != b


def test_run_trace_id(c: Any) -> None:
    assert c.run("echo", {"input": 1, "request_id": "req-from-task"})["metadata"]["trace_id"] == "req-from-task"
    assert c.run("echo", {"input": 1}, request_id="req-from-ctx")["metadata"]["trace_id"] == "req-from-ctx"
    got = c.run("echo", {"input": 1, "request_id": "req-from-task"}, request_id="req-from-ctx")
    assert got["metadata"]["trace_id"] == "req-from-task", "the task's request_id wins over the call's"
    assert c.run("echo", {"input": 1})["metadata"]["trace_id"]


def test_run_fail(c: Any) -> None:
    res = c.run("fail", {"id": "f1", "input": {"x": 1}})
    assert res["success"] is False
    assert res["error"]["type"] == "ModelError" and res["error"]["message"]
    assert res["task_id"] == "f1" and res["agent_name"] == "fail"


def test_run_unknown_agent(c: Any) -> None:
    with pytest.raises(S.RegistryError) as ei:
        c.run("nope", {"input": 1})
    assert 'unknown agent "nope" (registered agents: ' in str(ei.value) and "echo" in str(ei.value)
    assert ei.value.status == 404 and ei.value.request_id
    with pytest.raises(S.RegistryError, match="pair is a group: POST /groups/pair/run"):
        c.run("pair", {"input": 1})


def test_run_cancelled(c: Any) -> None:
    start = time.monotonic()
    with pytest.raises(S.TimeoutError) as ei:
        c.run("slow", {"input": 1}, timeout=0.1)
    assert ei.value.status == 0, "the client's own timeout: the server did not answer"
    assert time.monotonic() - start < EARLY


def test_gather_order(c: Any) -> None:
    tasks = inputs(50)
    results = c.gather("echo", tasks, max_concurrency=8)
    assert len(results) == 50
    for t, r in zip(tasks, results):
        assert r["success"] and r["task_id"] == t["id"] and r["output"] == t["input"]


def test_gather_failures(c: Any) -> None:
    tasks = inputs(3)
    for t, r in zip(tasks, c.gather("fail", tasks), strict=True):
        assert not r["success"] and r["error"]["type"] == "ModelError" and r["task_id"] == t["id"]


def test_gather_trace_id(c: Any) -> None:
    tasks = inputs(3)
    tasks[1]["request_id"] = "own-request"
    results = c.gather("echo", tasks, request_id="batch-request")
    assert [r["metadata"]["trace_id"] for r in results] == ["batch-request", "own-request", "batch-request"]


def test_gather_concurrency(c: Any) -> None:
    for n in (1, S.DEFAULT_GATHER_CONCURRENCY, S.MAX_GATHER_CONCURRENCY):
        assert len(c.gather("echo", inputs(3), max_concurrency=n)) == 3
    for n in (0, -1, S.MAX_GATHER_CONCURRENCY + 1):
        with pytest.raises(S.SpecValidationError):
            c.gather("echo", inputs(3), max_concurrency=n)


def test_gather_rejections(c: Any) -> None:
    with pytest.raises(S.SpecValidationError):
        c.gather("echo", [])
    with pytest.raises(S.RegistryError):
        c.gather("nope", inputs(2))


def test_ready(c: Any) -> None:
    c.ready()
    assert c.health() == {"status": "ok"}


def test_run_token_budget(c: Any) -> None:
    with pytest.raises(S.BudgetExceededError) as ei:
        c.run("echo", {"input": 1, "token_budget": 1})
    assert ei.value.status == 429
    assert c.run("echo", {"input": 1, "token_budget": 1000})["success"]
    out = c.gather("echo", [{"input": 1}, {"input": 2, "token_budget": 1}], max_concurrency=2)
    assert out[0]["success"] and not out[1]["success"] and out[1]["error"]["type"] == "BudgetExceededError"
    with pytest.raises(S.SpecValidationError):
        c.run("echo", {"input": 1, "token_budget": -1})


def collect(items: Any) -> tuple[dict[int, dict[str, Any]], list[BaseException]]:
    got: dict[int, dict[str, Any]] = {}
    errs: list[BaseException] = []
    try:
        for item in items:
            assert item.index not in got, f"task {item.index} answered twice"
            got[item.index] = item.result
    except S.SvcError as e:
        errs.append(e)
    return got, errs


def test_gather_stream(c: Any) -> None:
    tasks = inputs(60)
    got, errs = collect(c.gather_stream("echo", iter(tasks), max_concurrency=7, request_id="stream-batch"))
    assert not errs and len(got) == 60
    for i, t in enumerate(tasks):
        r = got[i]
        assert r["success"] and r["task_id"] == t["id"] and r["output"] == t["input"]
        assert r["metadata"]["trace_id"] == "stream-batch"


def test_gather_stream_invalid(c: Any) -> None:
    tasks: list[Any] = inputs(5)
    tasks[2] = S.InvalidTask("line 3: not a task")
    tasks[3] = {"input": object()}  # cannot be encoded: fails alone too
    got, errs = collect(c.gather_stream("echo", tasks, max_concurrency=2))
    assert not errs and len(got) == 5
    assert got[2]["success"] is False
    assert got[2]["error"] == {"type": "SpecValidationError", "message": "line 3: not a task"}
    assert got[3]["success"] is False and got[3]["error"]["type"] == "SpecValidationError"
    assert "encoding task 3" in got[3]["error"]["message"]
    assert all(got[i]["success"] for i in (0, 1, 4))


@pytest.mark.parametrize("agent,conc,want", [
    ("nope", 2, S.RegistryError), ("echo", 0, S.SpecValidationError),
    ("echo", S.MAX_GATHER_CONCURRENCY + 1, S.SpecValidationError)])
def test_gather_stream_rejections(c: Any, agent: str, conc: int, want: type) -> None:
    def run() -> tuple[dict[int, dict[str, Any]], list[BaseException]]:
        return collect(c.gather_stream(agent, inputs(3), max_concurrency=conc))

    if conc == 0 or conc > S.MAX_GATHER_CONCURRENCY:
        with pytest.raises(want):  # refused before a request
            run()
        return
    got, errs = run()
    assert not got and len(errs) == 1 and isinstance(errs[0], want)


def test_gather_stream_stop(c: Any) -> None:
    read = 0

    def endless() -> Iterator[dict[str, Any]]:
        nonlocal read
        i = 0
        while True:
            read += 1
            yield {"input": i}
            i += 1

    taken = 0
    start = time.monotonic()
    for _ in c.gather_stream("echo", endless(), max_concurrency=4):
        taken += 1
        if taken == 20:
            break
    assert read >= 20
    assert time.monotonic() - start < EARLY
    # The source is not read any further once the loop is left.
    seen = read
    time.sleep(0.2)
    assert read == seen, "the task source was read after the stream was closed"


def test_gather_stream_cancelled(server: Server) -> None:
    # The Go case ends the context at 200 ms: here the stream's cancel(),
    # from another thread (AsyncClient's is its task's cancel:
    # test_client.py's test_async_gather_stream_cancelled).
    c = S.Client(server.url)
    stream = c.gather_stream("slow", inputs(3), max_concurrency=3)
    timer = threading.Timer(0.2, stream.cancel)
    timer.start()
    start = time.monotonic()
    got, errs = collect(stream)
    timer.join()
    assert time.monotonic() - start < EARLY
    assert not any(r["success"] for r in got.values())
    assert len(errs) == 1 and isinstance(errs[0], S.CancelledError)
    c.close()


# --- groups --------------------------------------------------------------


def test_groups(c: Any) -> None:
    names = c.groups()
    assert names == sorted(names) and {"pair", "split", "slowpair"} <= set(names) and "nope" not in names


def mentions(mermaid: str, node: str) -> bool:
    return re.search(r"(^|[^A-Za-z0-9_])" + re.escape(node) + r"([^A-Za-z0-9_]|$)", mermaid) is not None


@pytest.mark.parametrize("group,nodes,edges,entry,terminal", [
    ("pair", [("a", "echo"), ("b", "echo")], [("a", "b")], ["a"], ["b"]),
    ("split", [("a", "echo"), ("b", "echo"), ("c", "echo")], [("a", "b"), ("a", "c")], ["a"], ["b", "c"]),
])
def test_group_topology(c: Any, group: str, nodes: list[tuple[str, str]], edges: list[tuple[str, str]],
                        entry: list[str], terminal: list[str]) -> None:
    topo = c.group_topology(group)
    assert topo["name"] == group and topo["kind"] == "graph"
    assert sorted((n["name"], n["agent"]) for n in topo["nodes"]) == nodes
    assert sorted((e["from"], e["to"]) for e in topo["edges"]) == edges
    assert sorted(topo["entry"]) == entry and sorted(topo["terminal"]) == terminal
    assert topo["mermaid"] and all(mentions(topo["mermaid"], n) for n, _ in nodes)


def test_group_unknown(c: Any) -> None:
    with pytest.raises(S.RegistryError):
        c.group_topology("nope")
    with pytest.raises(S.RegistryError):
        c.run_group("nope", {"input": 1})
    with pytest.raises(S.RegistryError, match="echo is an agent: POST /agents/echo/run"):
        c.run_group("echo", {"input": 1})


def test_run_group_pair(c: Any) -> None:
    a = c.run_group("pair", {"input": GROUP_INPUT, "request_id": "req-pair"})
    assert "group" not in a or a["group"] is not True, "one terminal fired: the AgentResult alone"
    assert a["success"] and a["error"] is None and a["output"] == GROUP_INPUT
    assert a["agent_name"] == "echo" and a["metadata"]["trace_id"] == "req-pair"


def test_run_group_trace_id(c: Any) -> None:
    assert c.run_group("pair", {"input": 1}, request_id="req-from-ctx")["metadata"]["trace_id"] == "req-from-ctx"
    got = c.run_group("pair", {"input": 1, "request_id": "req-from-task"}, request_id="req-from-ctx")
    assert got["metadata"]["trace_id"] == "req-from-task"
    g = c.run_group("split", {"input": 1})
    assert g["group"] is True and g["metadata"]["trace_id"]


def test_run_group_split(c: Any) -> None:
    g = c.run_group("split", {"input": GROUP_INPUT, "request_id": "req-split"})
    assert g["group"] is True and g["success"] is True
    assert sorted(g["outputs"]) == ["b", "c"]
    for out in g["outputs"].values():
        assert out["success"] and out["output"] == GROUP_INPUT and out["agent_name"] == "echo"
        assert out["metadata"]["trace_id"] == "req-split"
    assert g["metadata"]["trace_id"] == "req-split" and g["metadata"]["group_name"] == "split"


def test_run_group_cancelled(c: Any) -> None:
    start = time.monotonic()
    with pytest.raises(S.TimeoutError):
        c.run_group("slowpair", {"input": 1}, timeout=0.1)
    assert time.monotonic() - start < EARLY


# --- RunSubmit -----------------------------------------------------------


def wait_terminal(c: Any, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        st: dict[str, Any] = c.run_status(run_id)
        if st["state"] in ("completed", "failed", "cancelled"):
            return st
        assert time.monotonic() < deadline, f"run {run_id} still {st['state']}"
        time.sleep(0.01)


def types(evs: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in evs]


def test_submit_echo(c: Any) -> None:
    run = c.submit("echo", {"id": "task-1", "input": GROUP_INPUT, "request_id": "req-submit"})
    assert run.run_id and run.target == "echo"
    res = run.result(timeout=30)
    assert res["success"] and res["agent_name"] == "echo" and res["task_id"] == "task-1" and res["output"] == GROUP_INPUT
    assert res["metadata"]["trace_id"] == "req-submit"
    st = run.status()
    assert st["run_id"] == run.run_id and st["state"] == "completed" and st["trace_id"] == "req-submit"
    assert c.run_result(run.run_id) == res
    run.cancel()  # a finished run: allowed, changes nothing
    assert c.run_status(run.run_id)["state"] == "completed"


def test_submit_fail(c: Any) -> None:
    run = c.submit("fail", {"input": 1}, kind="agent")
    assert wait_terminal(c, run.run_id)["state"] == "failed"
    res = run.result()
    assert not res["success"] and res["error"]["type"] == "ModelError"


def test_submit_cancel(c: Any) -> None:
    run = c.submit("slow", {"input": 1})
    start = time.monotonic()
    c.cancel_run(run.run_id)
    assert wait_terminal(c, run.run_id)["state"] == "cancelled"
    assert time.monotonic() - start < EARLY
    with pytest.raises(S.RunStateError) as ei:
        c.run_result(run.run_id)
    assert ei.value.status == 409
    with pytest.raises(S.RunStateError):
        run.result()
    c.cancel_run(run.run_id)  # idempotent
    evs = list(run.events())
    assert evs and evs[-1]["type"] == "run_cancelled"
    assert wait_terminal(c, run.run_id)["state"] == "cancelled"


@pytest.mark.parametrize("target,kind", [("nope", None), ("nope", "agent"), ("echo", "group"), ("pair", "agent")])
def test_submit_unknown(c: Any, target: str, kind: str | None) -> None:
    with pytest.raises(S.RegistryError):
        c.submit(target, {"input": 1}, kind=kind)


@pytest.mark.parametrize("target,kind,want", [
    ("nope", None, 'unknown target "nope" (registered agents: '),
    ("echo", "group", 'echo is an agent: submit it with kind "agent"'),
    ("pair", "agent", 'pair is a group: submit it with kind "group"')])
def test_submit_unknown_says_what_to_do(c: Any, target: str, kind: str | None, want: str) -> None:
    with pytest.raises(S.RegistryError) as ei:
        c.submit(target, {"input": 1}, kind=kind)
    assert want in ei.value.detail


def test_unknown_run(c: Any) -> None:
    want = 'unknown run "nope-run"'
    for call in (lambda: c.cancel_run("nope-run"), lambda: c.run_status("nope-run"),
                 lambda: c.run_result("nope-run"), lambda: list(c.run_events("nope-run"))):
        with pytest.raises(S.RegistryError) as ei:
            call()
        assert ei.value.detail == want


def test_events(c: Any) -> None:
    run = c.submit("echo", {"id": "ev-task", "input": {"x": 1}})
    run.result()
    evs = list(run.events())
    assert types(evs)[:2] == ["agent_started", "agent_completed"]
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    for e in evs:
        assert e["run_id"] == run.run_id and e["timestamp"]
    for e in evs[:2]:
        assert e["agent"] == "echo" and not e["error"]
    assert list(run.events(after=1)) == evs[1:]
    assert list(run.events(after=evs[-1]["seq"])) == []


def test_events_live(c: Any) -> None:
    run = c.submit("slow", {"input": 1})
    evs = []
    it = run.events()
    run.cancel()
    for e in it:
        evs.append(e)
    assert evs and evs[-1]["type"] == "run_cancelled"


def test_submit_groups(c: Any) -> None:
    split = c.submit("split", {"input": GROUP_INPUT})
    g = split.result()
    assert g["group"] is True and g["success"] is True and len(g["outputs"]) == 2
    assert wait_terminal(c, split.run_id)["state"] == "completed"
    pair = c.submit("pair", {"input": GROUP_INPUT}, kind="group").result()
    assert pair.get("group") is not True and pair["output"] == GROUP_INPUT


def test_submit_token_budget(c: Any) -> None:
    run = c.submit("echo", {"input": 1, "token_budget": 1}, kind="agent")
    assert wait_terminal(c, run.run_id)["state"] == "failed"
    try:
        res = run.result()
    except S.RunStateError:
        pass
    else:
        assert not res["success"] and res["error"]["type"] == "BudgetExceededError"
    with pytest.raises(S.SpecValidationError):
        c.submit("echo", {"input": 1, "token_budget": -1}, kind="agent")


def test_submit_idempotent(c: Any) -> None:
    key = f"key-{time.time_ns()}"
    first = c.submit("echo", {"input": 1, "request_id": "req-idem"}, idempotency_key=key)
    again = c.submit("echo", {"input": 1, "request_id": "req-idem"}, idempotency_key=key)
    assert again.run_id == first.run_id
    with pytest.raises(S.RunStateError):
        c.submit("echo", {"input": 2, "request_id": "req-idem"}, idempotency_key=key)
    wait_terminal(c, first.run_id)


def test_events_with_deltas(c: Any) -> None:
    run = c.submit("echo", {"input": "one two three"})
    run.result()
    want = list(run.events())
    for after in (0, 1):
        assert list(run.events(after=after, deltas=True)) == want[after:]
    with pytest.raises(S.RegistryError, match='unknown run "nope-run"'):
        list(c.run_events("nope-run", deltas=True))


def test_events_with_deltas_live(c: Any) -> None:
    run = c.submit("slow", {"input": 1})
    it = run.events(deltas=True)
    run.cancel()
    evs = list(it)
    for e in evs:
        if e["type"] == "delta":
            assert e["seq"] == 0 and e["run_id"] == run.run_id and e["text"]
    assert evs and evs[-1]["type"] == "run_cancelled"


# --- token streaming (the Go client's RunStream) ----------------------------


def test_run_stream(c: Any) -> None:
    evs = list(c.run_stream("writer", {"input": "draft", "request_id": "req-stream"}))
    deltas, last = evs[:-1], evs[-1]
    assert last["type"] == "result" and last["result"]["success"]
    assert last["result"]["metadata"]["trace_id"] == "req-stream"
    assert len(deltas) >= 2 and all(d["type"] == "delta" and d["agent"] == "writer" for d in deltas)
    assert [d["index"] for d in deltas] == list(range(len(deltas)))
    assert "".join(d["text"] for d in deltas) == last["result"]["output"] == "one two three four five six"


def test_run_stream_errors(c: Any) -> None:
    with pytest.raises(S.RegistryError):
        list(c.run_stream("nope", {"input": 1}))
    with pytest.raises(S.BudgetExceededError):
        list(c.run_stream("echo", {"input": 1, "token_budget": 1}))
