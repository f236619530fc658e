"""wmrl.execution: sandboxed execution of solution programs, executor pools (local, Ray), the execution log.

Light imports only here; see :mod:`wmrl.execution.sandbox` (bubblewrap sandbox and limits),
:mod:`wmrl.execution.runner` (run + grade -> :class:`ExecutionResult`), :mod:`wmrl.execution.pool`
(:class:`LocalExecutor`), :mod:`wmrl.execution.ray_pool` (:class:`RayExecutor`, imports ray lazily),
:mod:`wmrl.execution.log` (:class:`ExecutionLog`), :mod:`wmrl.execution.bench`.
"""
from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import ExecutionFuture, LocalExecutor
from wmrl.execution.runner import classify, execute, outcome
from wmrl.execution.sandbox import SandboxConfig, SandboxRun, SandboxUnavailable, UnsandboxedWarning, run_program
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash

__all__ = [
    "ExecutionFuture", "ExecutionLog", "ExecutionRequest", "ExecutionResult", "ExecutionStatus",
    "LocalExecutor", "SandboxConfig", "SandboxRun", "SandboxUnavailable", "UnsandboxedWarning",
    "classify", "execute", "outcome", "program_hash", "run_program",
]
