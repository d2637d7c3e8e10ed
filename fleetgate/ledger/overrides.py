"""Tensor buffer-type overrides: ``-ot PATTERN=BUFT``, ``--cpu-moe``, ``--n-cpu-moe N``, ``--n-cpu-ffn N``.

- What the flags build (common/arg.cpp): ``-ot`` splits its value on ``,`` and appends one override per
  ``PATTERN=BUFT`` (``parse_tensor_buffer_overrides``; a buffer type no device offers is refused: "unknown buffer
  type"); ``--cpu-moe`` appends ``LLM_FFN_EXPS_REGEX`` to the CPU (``llm_ffn_exps_cpu_override``); ``--n-cpu-moe N``
  and ``--n-cpu-ffn N`` append ``blk\\.i`` + the expert (``LLM_FFN_EXPS_REGEX``) or dense FFN
  (``LLM_FFN_DENSE_REGEX``) pattern for ``i`` in ``0..N-1`` (common/common.h, ``llm_add_n_cpu_ffn_overrides``).
  Every handler appends, so repeated flags add up (the "specified multiple times" warning notwithstanding);
  environment variables are applied before argv, in the option table's order (common/arg.cpp,
  ``common_params_parse_ex``: "handle environment variables" first).
- How the loader applies them (src/llama-model-loader.cpp, ``create_tensor``'s ``buft_for_tensor``): for every
  tensor it creates (input, output and repeating alike; skipped nextn tensors never get there), the overrides are
  tried in order with ``std::regex_search`` against the tensor's name and the first match wins. An override to
  ``CPU`` picks the first CPU buffer type that can hold the tensor (``select_weight_buft`` over
  ``make_cpu_buft_list``: the first GPU's pinned host type, the CPU's extra types such as ``CPU_REPACK``, then
  ``CPU``); a pinned host type with mmap becomes plain ``CPU`` (mapped). Any other override names a device's own
  buffer type (``CUDA0``, ``RPC0[host:port]``) and the tensor goes there whatever its layer's device.

The patterns are ECMAScript regular expressions (std::regex's default); Python's ``re`` reads the ones these flags
build and the usual hand-written ones (``exps``, ``blk\\.[0-2]\\.``, ``ffn_(up|down)_exps``) the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from fleetgate.engines.argv import FlagUse
from fleetgate.engines.llamacpp import TRUTHY, LlamaServerConfig

__all__ = ["FFN_DENSE_REGEX", "FFN_EXPS_REGEX", "Moved", "TensorOverride", "match_override", "tensor_overrides"]

FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""common/common.h ``LLM_FFN_EXPS_REGEX``."""
FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."
"""common/common.h ``LLM_FFN_DENSE_REGEX``."""

# the option table's order (common/arg.cpp), which is the order environment variables are applied in
_FLAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ot", ("-ot", "--override-tensor", "LLAMA_ARG_OVERRIDE_TENSOR")),
    ("cmoe", ("-cmoe", "--cpu-moe", "LLAMA_ARG_CPU_MOE")),
    ("ncmoe", ("-ncmoe", "--n-cpu-moe", "LLAMA_ARG_N_CPU_MOE")),
    ("ncffn", ("-ncffn", "--n-cpu-ffn", "LLAMA_ARG_N_CPU_FFN")),
)


@dataclass(frozen=True)
class TensorOverride:
    """One entry of the engine's override list: a pattern and the buffer type it sends matching tensors to."""

    pattern: str
    buffer_type: str
    """As the engine names it: ``CPU``, ``CUDA0``, ``RPC0[host:port]``."""
    flag: FlagUse
    """The flag (or environment variable) that added it."""

    @property
    def origin(self) -> str:
        return f"{self.flag.flag} {self.flag.value}" if self.flag.value not in (None, "") else self.flag.flag


@dataclass(frozen=True)
class Moved:
    """A tensor an override took off its layer's device."""

    tensor: str
    source: str
    """The device its layer is placed on (``CPU`` for the host)."""
    target: str
    """The buffer type the override names."""
    nbytes: int
    override: TensorOverride


def _uses(config: LlamaServerConfig) -> list[tuple[int, FlagUse]]:
    found: list[tuple[int, int, FlagUse]] = []
    for uses in config.parsed.uses.values():
        for use in uses:
            for rank, (_, names) in enumerate(_FLAGS):
                if use.flag in names:
                    # environment variables first, in table order; then argv in its order
                    found.append((0 if use.index is None else 1, rank if use.index is None else use.index, use))
    found.sort(key=lambda x: (x[0], x[1]))
    return [(next(r for r, (_, names) in enumerate(_FLAGS) if use.flag in names), use) for _, _, use in found]


def tensor_overrides(config: LlamaServerConfig) -> tuple[TensorOverride, ...]:
    """The engine's override list for the target model, in the order the loader tries it. Raises ``ValueError``
    (the engine's own words) for a value the engine refuses."""
    overrides: list[TensorOverride] = []
    for rank, use in _uses(config):
        kind = _FLAGS[rank][0]
        value = use.value
        if kind == "ot":
            for item in (value or "").split(","):
                pattern, sep, buft = item.partition("=")
                if not sep:
                    raise ValueError(f"{use.flag} {value!r}: invalid value (expected PATTERN=BUFFER_TYPE)")
                overrides.append(TensorOverride(pattern, buft, use))
        elif kind == "cmoe":
            if value is None or value.lower() in TRUTHY or value == "":
                overrides.append(TensorOverride(FFN_EXPS_REGEX, "CPU", use))
        else:
            try:
                n = int(value or "")
            except ValueError:
                raise ValueError(f"{use.flag} {value!r}: invalid value") from None
            if n < 0:
                raise ValueError(f"{use.flag} {value!r}: invalid value")
            regex = FFN_EXPS_REGEX if kind == "ncmoe" else FFN_DENSE_REGEX
            overrides.extend(TensorOverride(rf"blk\.{i}{regex}", "CPU", use) for i in range(n))
    return tuple(overrides)


def match_override(name: str, overrides: Sequence[TensorOverride]) -> TensorOverride | None:
    """The first override whose pattern ``std::regex_search`` finds in the tensor's name."""
    for override in overrides:
        if re.search(override.pattern, name):
            return override
    return None
