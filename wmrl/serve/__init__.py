"""wmrl.serve: the sandbox and the world model as HTTP services with one contract, and their clients.

:mod:`wmrl.serve.contract` (the typed, versioned contract), :mod:`wmrl.serve.sandbox_app` (``wmrl serve sandbox``),
:mod:`wmrl.serve.world_model_app` (``wmrl serve world-model``), :mod:`wmrl.serve.batching` (the micro-batching
queue), :mod:`wmrl.serve.client` (:class:`RemoteExecutor`, :class:`RemoteWorldModel`). Light imports only here;
docs/services.md.
"""
