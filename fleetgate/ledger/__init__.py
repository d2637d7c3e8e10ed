"""The ledger: what one llama-server process holds on each device, mirroring llama.cpp build 11434.

Every figure is computed the way the engine allocates it, and named the way llama-server names the
buffer in its load log (``model``, ``KV``, ``RS``, ``compute``, ``output``). One module per allocation phase,
in the order ``build.build_ledger`` books them (each module's docstring cites the source it mirrors):

- ``context``: the context's size and batches, and whether it runs flash attention;
- ``placement``: the devices of the command line, and which of them holds each block and the output layer;
- ``weights``: each device's weights, and how the host holds its own (mapped, pinned, repacked);
- ``kv``: the KV caches, and one slot's KV in a saved state;
- ``recurrent``: the recurrent state of hybrid models, with a drafter's rollback rows;
- ``drafters``: a separate draft model's weights and KV, or the MTP context's KV;
- ``projector``: the multimodal projector's weights and compute buffers;
- ``runtime``: a GPU process's memory outside every buffer (calibrated);
- ``compute``: the compute buffers, calibrated or estimated;
- ``outputs``: the output buffers in host memory.

Beside them: ``devices`` (devices and their buffer types), ``accounts`` (buffers, the ledger and its JSON form),
``options`` (options read by flag), ``build`` (the phases in order, and the ledger they add up to), ``verdict``
(fits or not; the ``--tensor-split`` sweep), ``service`` (a rendered fleet service's ledger and sweep), and
``vllm`` (vLLM's ledger at start).
"""

from __future__ import annotations

__all__: list[str] = []
