"""Maintainers' tools, run from a checkout and never shipped in the wheel: the extractors that regenerate
fleetgate/engines/*.json from the engines' published sources, and this repository's restructuring script."""
