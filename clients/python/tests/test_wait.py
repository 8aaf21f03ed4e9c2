"""Human in the loop, for Client and for AsyncClient, against a real svc
serve (its default SQLite store keeps the step log a waiting run resumes
from): a submitted run of gated waits for the approval of its
current_time call, one of asker for the answer to its ask_human question
(tests/specs)."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

import svc_client as S
from adapters import SyncOverAsync
from conftest import Server

# A bound on waits that should end at once (a loaded machine included),
# not a timing assertion.
BOUND = 30.0


@pytest.fixture(params=["sync", "async"])
def c(request: pytest.FixtureRequest, server: Server) -> Iterator[Any]:
    cl = S.Client(server.url) if request.param == "sync" else SyncOverAsync(server.url)
    yield cl
    cl.close()


def until_waiting(run: Any) -> dict[str, Any]:
    """Polls the run's status until it waits; returns that status."""
    deadline = time.monotonic() + BOUND
    while True:
        st: dict[str, Any] = run.status()
        if st["state"] == "waiting":
            return st
        assert st["state"] in ("pending", "running"), f"run {run.run_id} is {st['state']}, not on its way to waiting"
        assert time.monotonic() < deadline, f"run {run.run_id} not waiting within {BOUND} s"
        time.sleep(0.02)


def test_approve(c: Any) -> None:
    run = c.submit("gated", {"input": "approve me"})
    st = until_waiting(run)
    assert len(st["waiting"]) == 1
    w = st["waiting"][0]
    assert w["id"].startswith("req_") and w["kind"] == "approval"
    assert w["agent"] == "gated" and w["tool"] == "current_time" and w["created_at"]
    # Waiting is not terminal: no result yet.
    with pytest.raises(S.RunStateError) as ei:
        c.run_result(run.run_id)
    assert ei.value.status == 409

    after = run.resume(w["id"], approve=True)
    assert after["run_id"] == run.run_id
    assert after["state"] in ("running", "completed"), after
    assert not after.get("waiting"), "the answered request is still open"

    res = run.result(timeout=BOUND)
    assert res["success"] is True and res["output"]["echo"] == "approve me"
    # The approved call happened: its result is the tool's, a time.
    assert isinstance(res["output"]["tools"]["current_time"]["time"], str)
    assert run.status()["state"] == "completed"


def test_deny_on_the_stream(c: Any) -> None:
    run = c.submit("gated", {"input": "deny me"})
    seen: list[str] = []
    request: dict[str, Any] | None = None
    for ev in run.events():
        seen.append(ev["type"])
        if ev["type"] != "run_waiting":
            continue
        # The stream stays open while the run waits; answer from it.
        request = ev["request"]
        st = run.status()
        assert st["state"] == "waiting" and [x["id"] for x in st["waiting"]] == [request["id"]]
        assert request["kind"] == "approval" and request["tool"] == "current_time"
        c.resume_run(run.run_id, request["id"], approve=False, reason="not on a Sunday")
    assert request is not None, f"no run_waiting event in {seen}"
    assert seen.index("run_resumed") > seen.index("run_waiting"), seen
    assert seen[-1] == "agent_completed", seen
    res = run.result(timeout=BOUND)
    assert res["success"] is True
    # The tool was not called: the model got the denial and its reason.
    denied = res["output"]["tools"]["current_time"]
    assert isinstance(denied, str) and "denied" in denied and "not on a Sunday" in denied


def test_resume_refusals(c: Any) -> None:
    run = c.submit("gated", {"input": "once"})
    w = until_waiting(run)["waiting"][0]
    with pytest.raises(S.RunStateError) as ei:
        run.resume("req_0000000000000000", approve=True)
    assert ei.value.status == 409
    assert 'no request "req_0000000000000000"' in ei.value.detail and f"open: {w['id']}" in ei.value.detail
    # A decision that does not fit: 400, and the run waits on.
    with pytest.raises(S.SpecValidationError) as ei2:
        run.resume(w["id"], answer="yes")
    assert ei2.value.status == 400 and "asks for an approval" in ei2.value.detail
    st = run.status()
    assert st["state"] == "waiting" and [x["id"] for x in st["waiting"]] == [w["id"]]

    run.resume(w["id"], approve=True)
    run.result(timeout=BOUND)
    with pytest.raises(S.RunStateError) as ei3:
        run.resume(w["id"], approve=True)
    assert ei3.value.status == 409 and "is completed, not waiting" in ei3.value.detail
    assert isinstance(ei3.value, S.AgentRuntimeError)


def test_resume_needs_a_request_id(c: Any) -> None:
    with pytest.raises(TypeError, match="request_id ''"):
        c.resume_run("01a20fc7-bb21-798e-b57a-41ea6f94134a", "", approve=True)
    with pytest.raises(TypeError):
        c.resume_run("", "req_1", approve=True)


def test_cancel_a_waiting_run(c: Any) -> None:
    run = c.submit("gated", {"input": "cancel me"})
    w = until_waiting(run)["waiting"][0]
    run.cancel()
    assert run.status()["state"] == "cancelled"
    with pytest.raises(S.RunStateError):
        run.resume(w["id"], approve=True)
    with pytest.raises(S.RunStateError):
        run.result(timeout=BOUND)


def test_sync_run_is_approval_required(c: Any) -> None:
    with pytest.raises(S.ApprovalRequiredError) as ei:
        c.run("gated", {"input": "now"})
    e = ei.value
    assert type(e).__bases__ == (S.AgentRuntimeError,) and not isinstance(e, S.SpecValidationError)
    assert e.status == 409 and e.kind == "ApprovalRequiredError" and e.agent == "gated"
    assert "current_time" in e.detail and "submit the run" in e.detail
    # In a gather, each such task is its own failed result.
    rs = c.gather("gated", [{"input": 1}, {"input": 2}])
    assert [(r["success"], r["error"]["type"]) for r in rs] == [(False, "ApprovalRequiredError")] * 2


@pytest.mark.parametrize("answer", [{"color": "blue", "shades": [1, 2]}, None, 0, ""])
def test_answer_a_question(c: Any, answer: Any) -> None:
    run = c.submit("asker", {"input": "ask"})
    w = until_waiting(run)["waiting"][0]
    assert w["kind"] == "question" and w["tool"] == "ask_human"
    with pytest.raises(S.SpecValidationError, match="asks a question"):
        run.resume(w["id"], approve=True)
    # None, 0 and "" are answers too: only a missing one is left out.
    run.resume(w["id"], answer=answer)
    res = run.result(timeout=BOUND)
    assert res["success"] is True
    assert res["output"]["tools"]["ask_human"] == answer


def test_result_waits_through_the_wait(server: Server) -> None:
    # result() of a waiting run waits until someone resumes it.
    with S.Client(server.url) as cl:
        run = cl.submit("gated", {"input": "patient"})
        w = until_waiting(run)["waiting"][0]
        got: list[dict[str, Any]] = []
        t = threading.Thread(target=lambda: got.append(run.result(timeout=BOUND)))
        t.start()
        time.sleep(0.3)
        assert not got, "result() returned while the run waited"
        run.resume(w["id"], approve=True)
        t.join(BOUND)
        assert got and got[0]["success"] is True
