"""A service's start shape turned into its rendered config: the dispatcher (``dispatch``), the inputs the unit
gives a serve script (``inputs``), the script run in the sandbox with the engine stubbed (``script``), the types every
shape builds (``types``) and the rendered service with the run's one renderer (``rendered``)."""

__all__: list[str] = []
