"""svc_client: the Python client of the svc agent runtime's HTTP API.

``Client`` (blocking) and ``AsyncClient`` (asyncio) run agents and groups,
gather batches (streamed both ways for batches of any size), submit runs
and follow them, and read the runtime's events and rollups. A problem
answer is raised as the class of its kind (``RegistryError``,
``BudgetExceededError``, ...), all ``SvcError``s.
"""

from ._base import UNSET
from ._duplex import GatherStream
from ._wire import (
    DEFAULT_GATHER_CONCURRENCY,
    DEFAULT_TIMEOUT,
    MAX_GATHER_CONCURRENCY,
    GatherItem,
    InvalidTask,
)
from .aio import AsyncClient, AsyncRunHandle
from .client import Client, RunHandle
from .errors import *  # noqa: F403
from .errors import ERROR_KINDS, __all__ as _errors_all

__all__ = [
    "Client",
    "RunHandle",
    "AsyncClient",
    "AsyncRunHandle",
    "GatherItem",
    "GatherStream",
    "InvalidTask",
    "DEFAULT_TIMEOUT",
    "DEFAULT_GATHER_CONCURRENCY",
    "MAX_GATHER_CONCURRENCY",
    "UNSET",
    "ERROR_KINDS",
    *_errors_all,
]

__version__ = "0.0.0"
