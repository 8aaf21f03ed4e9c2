"""Errors rebuilt from the server's problem+json answers (RFC 9457).

The problem body's ``error`` field names the kind; each kind is a class
here, with the server's hierarchy (``svc.Kind.Parent`` in errors.go):
TopologyError, PayloadTooLargeError, UnsupportedMediaTypeError,
BadRequestError and HeaderTooLargeError are SpecValidationErrors, every
other kind is an AgentRuntimeError, and all are SvcErrors. A kind this
package does not know becomes an AgentRuntimeError whose ``kind`` still
names it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

__all__ = [
    "SvcError",
    "AgentRuntimeError",
    "SpecValidationError",
    "TopologyError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "BadRequestError",
    "HeaderTooLargeError",
    "ForbiddenOriginError",
    "TrustViolationError",
    "RegistryError",
    "RunStateError",
    "BudgetExceededError",
    "DepthLimitError",
    "SpawnCycleError",
    "SpawnError",
    "SpawnCapError",
    "ToolExecutionError",
    "AllAgentsFailedError",
    "ModelError",
    "TimeoutError",
    "CancelledError",
    "ShuttingDownError",
    "UnauthorizedError",
    "OutputValidationError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ConditionError",
    "RequestTimeoutError",
    "MisdirectedRequestError",
    "OverloadedError",
    "ContextError",
    "ApprovalRequiredError",
    "ForbiddenError",
    "ERROR_KINDS",
    "error_from_problem",
]


class SvcError(Exception):
    """The base of every error an svc server answers with (and of the
    client's own: a timeout, a failed connection).

    Attributes: ``status`` (the HTTP status; 0 when the server did not
    answer), ``kind`` (the problem's ``error`` field, e.g.
    ``"RegistryError"``), ``detail``, ``request_id`` (the problem's, or the
    X-Request-Id header), ``agent``, ``task_id``, ``reason`` and
    ``problem`` (the whole body as sent, or None).
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int = 0,
        kind: str | None = None,
        request_id: str = "",
        agent: str = "",
        task_id: str = "",
        reason: str = "",
        problem: Mapping[str, Any] | None = None,
    ) -> None:
        self.kind: str = kind or type(self).__name__
        super().__init__(f"{self.kind}: {detail}" if detail else self.kind)
        self.status: int = status
        self.detail: str = detail
        self.request_id: str = request_id
        self.agent: str = agent
        self.task_id: str = task_id
        self.reason: str = reason
        self.problem: Mapping[str, Any] | None = problem


class AgentRuntimeError(SvcError):
    """The base kind of the runtime's errors."""


class SpecValidationError(AgentRuntimeError):
    """A bad spec or request (400)."""


class TopologyError(SpecValidationError):
    """A group whose graph is invalid."""


class PayloadTooLargeError(SpecValidationError):
    """A request body, or a line of a streamed gather, over the limit (413)."""


class UnsupportedMediaTypeError(SpecValidationError):
    """A request body that is not application/json (415)."""


class BadRequestError(SpecValidationError):
    """A request the server could not parse."""


class HeaderTooLargeError(SpecValidationError):
    """Request headers over the server's bound (431)."""


class ForbiddenOriginError(AgentRuntimeError):
    """A browser request from an origin the server does not allow (403)."""


class TrustViolationError(AgentRuntimeError):
    """A tool above the agent's trust level (403)."""


class RegistryError(AgentRuntimeError):
    """An unknown agent, group, tool or run (404)."""


class RunStateError(AgentRuntimeError):
    """A run not finished, or cancelled (409); an idempotency key reused
    for another request."""


class BudgetExceededError(AgentRuntimeError):
    """The token budget is spent (429)."""


class DepthLimitError(AgentRuntimeError):
    """Spawns nested past max_spawn_depth (429)."""


class SpawnCycleError(AgentRuntimeError):
    """An agent spawning itself through its children (429)."""


class SpawnError(AgentRuntimeError):
    """A child agent could not be spawned (500)."""


class SpawnCapError(AgentRuntimeError):
    """A run spawned more children than its cap allows."""


class ToolExecutionError(AgentRuntimeError):
    """A tool failed (500)."""


class AllAgentsFailedError(AgentRuntimeError):
    """Every item of a fan-out failed (500)."""


class ModelError(AgentRuntimeError):
    """The provider failed after the fallbacks (502)."""


class TimeoutError(AgentRuntimeError):  # noqa: A001 - the server's kind name
    """The run exceeded its timeout_seconds (504), or the client's timeout
    passed before the server answered (status 0). Not the builtin
    TimeoutError: catch ``svc_client.TimeoutError``."""


class CancelledError(AgentRuntimeError):
    """The run was cancelled."""


class ShuttingDownError(AgentRuntimeError):
    """The server is shutting down (503, Retry-After)."""


class UnauthorizedError(AgentRuntimeError):
    """A missing or wrong bearer token (401)."""


class OutputValidationError(AgentRuntimeError):
    """The model's output did not fit the agent's output_type."""


class NotFoundError(AgentRuntimeError):
    """A path the server has no route for (404)."""


class MethodNotAllowedError(AgentRuntimeError):
    """A known path asked with a method it does not serve (405)."""


class ConditionError(AgentRuntimeError):
    """A group's CEL expression failed while a run evaluated it."""


class RequestTimeoutError(AgentRuntimeError):
    """The request's body did not arrive within the server's read timeout (408)."""


class MisdirectedRequestError(AgentRuntimeError):
    """A Host header the server does not serve (421)."""


class OverloadedError(AgentRuntimeError):
    """The server has no room for the request now (503, Retry-After)."""


class ContextError(AgentRuntimeError):
    """The prompt does not fit the model's context window."""


class ApprovalRequiredError(AgentRuntimeError):
    """A sync run or group run reached a call that waits for a person (a
    tool that needs approval, or ask_human) (409): only a submitted run can
    wait; submit it and answer with resume_run. In a gather, such a task is
    a failed result whose error type names this kind."""


class ForbiddenError(AgentRuntimeError):
    """The API key is valid but lacks the scope the route needs (403)."""


def _kinds() -> dict[str, type[SvcError]]:
    out: dict[str, type[SvcError]] = {}
    todo: list[type[SvcError]] = [AgentRuntimeError]
    while todo:
        cls = todo.pop()
        out[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return out


#: Every kind the client knows, by its wire name (the server's Kind values).
ERROR_KINDS: Mapping[str, type[SvcError]] = _kinds()

_KIND_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,58}Error$")


def error_from_problem(
    status: int, content_type: str, body: bytes, header_request_id: str = ""
) -> SvcError:
    """Rebuilds the error of an answer that is not 2xx.

    A problem naming a kind becomes an instance of that kind's class (an
    AgentRuntimeError for a kind this package does not know, its ``kind``
    still the name); anything else (a proxy's HTML page, an empty body)
    becomes an AgentRuntimeError quoting the status and the start of the
    body.
    """
    problem: Any = None
    mt = content_type.split(";", 1)[0].strip().lower()
    if mt in ("application/json", "application/problem+json"):
        try:
            problem = json.loads(body)
        except ValueError:
            problem = None
    if isinstance(problem, dict):
        kind = problem.get("error")
        detail = ""
        for key in ("detail", "message", "title"):
            v = problem.get(key)
            if isinstance(v, str) and v.strip():
                detail = v
                break
        rid = problem.get("request_id")
        fields: dict[str, Any] = {
            "status": int(problem["status"]) if isinstance(problem.get("status"), int) else status,
            "request_id": rid if isinstance(rid, str) and rid else header_request_id,
            "agent": _str(problem.get("agent")),
            "task_id": _str(problem.get("task_id")),
            "reason": _str(problem.get("reason")),
            "problem": problem,
        }
        if isinstance(kind, str) and _KIND_NAME.match(kind):
            cls = ERROR_KINDS.get(kind, AgentRuntimeError)
            err: SvcError = cls(detail or f"HTTP {status}", kind=kind, **fields)
            return err
        if detail:
            return AgentRuntimeError(f"HTTP {status}: {_quote(detail)}", kind="AgentRuntimeError", **fields)
    snippet = _quote(body.decode("utf-8", "replace"))
    return AgentRuntimeError(
        f"HTTP {status}: {snippet}" if snippet else f"HTTP {status}",
        status=status,
        kind="AgentRuntimeError",
        request_id=header_request_id,
    )


def error_from_info(info: Mapping[str, Any], status: int = 0) -> SvcError:
    """The error of an ErrorInfo ``{type, message}`` (a gather summary's)."""
    kind = _str(info.get("type")) or "AgentRuntimeError"
    cls: type[SvcError] = ERROR_KINDS.get(kind, AgentRuntimeError) if _KIND_NAME.match(kind) else AgentRuntimeError
    return cls(_str(info.get("message")), status=status, kind=kind)


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _quote(s: str, limit: int = 200) -> str:
    s = " ".join(s.split())
    s = "".join(c for c in s if c.isprintable())
    return s if len(s) <= limit else s[:limit] + "…"
