"""The llama-server options the ledger reads that ``LlamaServerConfig`` gives no field of its own: by flag, or by
destination with the engine's default."""

from __future__ import annotations

from fleetgate.engines.llamacpp import LlamaServerConfig

__all__ = ["flag_value", "option_value"]


def flag_value(config: LlamaServerConfig, *names: str) -> str | None:
    """The value of an option fleetgate does not interpret by name (last use wins); '' for a switch."""
    found: str | None = None
    for uses in config.parsed.uses.values():
        for use in uses:
            if use.flag in names:
                found = use.value if use.value is not None else ""
    return found


def option_value(config: LlamaServerConfig, dest: str, default: str) -> str:
    use = config.use(dest)
    return use.value if use is not None and use.value is not None else default
