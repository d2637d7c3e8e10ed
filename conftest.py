"""Repository-wide pytest setup: the suite's own tests drive the plugin with pytester."""

import contextlib

# httpx imports httpcore on first use and keeps httpcore's exception classes to translate them. pytester's
# in-process runs drop every module first imported during them, so an httpcore imported inside one would be
# imported again afterwards with new classes, and httpx would let a raw httpcore.ConnectError through to
# every later test of that worker (which expect httpx.TransportError). Imported here, it is never dropped.
# Where httpx is not installed the plugin says so itself, naming what imports it.
with contextlib.suppress(ModuleNotFoundError):
    import httpcore  # noqa: F401

pytest_plugins = ["pytester"]
