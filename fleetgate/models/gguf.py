"""GGUF header -> model profile.

The header is read with the ``gguf`` package (``GGUFReader`` memory-maps the file; tensor data is never
touched). What the ledger needs is resolved here the way llama.cpp build 11434 resolves it when it loads
the file, so a profile written from a GGUF and the engine agree on every layer:

- ``block_count`` counts the nextn (MTP) blocks too; ``nextn_predict_layers`` of them sit at the end
  (src/llama-model.cpp, ``llama_model_base::load_hparams``; src/llama-hparams.cpp, ``n_layer()``).
- ``head_count_kv`` may be one number or one per block (``get_key_or_arr``).
- Which blocks are recurrent: ``%s.attention.recurrent_layers``, else every block whose
  ``(il + 1) % full_attention_interval != 0`` (default 4), nextn blocks never (src/models/qwen35.cpp,
  ``load_arch_hparams``).
- Which blocks use the sliding window: ``%s.attention.sliding_window_pattern`` as an array, else as a
  period ``p`` (block windowed when ``il % p < p - 1``, or ``il % p != 0`` for dense-first families), else
  the architecture's default period (src/llama-hparams.cpp, ``set_swa_pattern``; src/llama-model.cpp,
  ``load_swa_pattern``; the periods are in src/models/*.cpp).

A profile is TOML. Its ``[layers] pattern`` has one letter per block: ``A`` full attention, ``S``
sliding-window attention, ``R`` recurrent, ``N`` nextn (MTP) block.

A header without the file (by HTTP range requests), split GGUFs and the profile of any source are
``fleetgate.models.gguf_remote``'s.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgate.errors import InputError

if TYPE_CHECKING:
    from fleetgate.models.gguf_package import GGUFPackage

__all__ = [
    "HYBRID_ARCHS",
    "KV_CACHE_TYPES",
    "MAX_ARRAY",
    "MIN_KV_BYTES",
    "MIN_TENSOR_BYTES",
    "RS_ROLLBACK_ARCHS",
    "SWA_DEFAULT_PERIOD",
    "Header",
    "TensorInfo",
    "ggml_type_size",
    "gguf_package",
    "profile_data",
    "profile_toml",
    "read_header",
    "row_bytes",
    "tensor_bytes",
]

# Architectures whose recurrent layers follow qwen35's rule (src/llama-model.cpp, create_memory: the
# qwen3next/qwen35/qwen35moe filters; src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp).
HYBRID_ARCHS = frozenset({"qwen35", "qwen35moe", "qwen3next"})
# Hybrid architectures whose recurrent state supports partial rollback, so a drafter sizes
# n_rs_seq snapshots per sequence (src/llama-arch.cpp, llm_arch_supports_rs_rollback).
RS_ROLLBACK_ARCHS = frozenset({"qwen35", "qwen35moe"})
# Default sliding-window period and dense-first flag when the GGUF carries no pattern
# (src/models/<arch>.cpp, load_swa_pattern(ml, n, dense_first)).
SWA_DEFAULT_PERIOD: Mapping[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "cohere2": (4, False), "cohere2moe": (4, True),
    "exaone4": (4, False), "exaone-moe": (4, False), "olmo2": (4, False), "gpt-oss": (2, False),
    "llama4": (4, False), "afmoe": (4, False), "mellum": (4, False), "plamo3": (8, False),
    "muse-glimmer": (4, False), "smallthinker": (4, True), "laguna": (4, True), "phi3": (1, False),
}
# Architectures that are recurrent on every layer or hybrid in ways fleetgate does not model yet.
UNMODELLED_MEMORY = frozenset({
    "mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "jamba", "falcon-h1", "plamo2",
    "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe", "kimi-linear", "bailingmoe3",
    "kimi-k3", "glm5-next", "qwen4exp", "deepseek4", "minimax-01",
})


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: str
    shape: tuple[int, ...]
    """ne0, ne1, ... as llama.cpp counts them (innermost first)."""
    nbytes: int
    offset: int | None
    """From the start of the GGUF data section; None in a reconstructed profile."""


@dataclass(frozen=True)
class Header:
    path: Path
    file_bytes: int
    data_offset: int
    fields: Mapping[str, Any]
    """Every key/value; arrays longer than 4096 entries are kept as their length only."""
    tensors: tuple[TensorInfo, ...]

    @property
    def architecture(self) -> str:
        return str(self.fields.get("general.architecture", ""))

    def arch_key(self, key: str, default: Any = None) -> Any:
        return self.fields.get(f"{self.architecture}.{key}", default)

    def number(self, key: str, default: int | None = None) -> int:
        """An architecture key that must be a non-negative integer below 2**32: one ``InputError`` line naming
        the file and the field otherwise (a flipped byte must not become a 4-billion-block model)."""
        name = f"{self.architecture}.{key}"
        value = self.fields.get(name, default)
        if value is None:
            raise InputError(self.path, None, f"no {name} key; expected an unsigned integer")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
            shown = repr(value) if not isinstance(value, (list, dict)) else type(value).__name__
            raise InputError(self.path, None, f"{name} is {shown}; expected an unsigned integer")
        return value


# The KV cache types llama-server accepts (common/arg.cpp, kv_cache_types) with their (block, bytes)
# from ggml/src/ggml.c type_traits: kept here so that sizing a cache does not import numpy.
KV_CACHE_TYPES: Mapping[str, tuple[int, int]] = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20),
    "IQ4_NL": (32, 18), "Q5_0": (32, 22), "Q5_1": (32, 24),
}


def ggml_type_size(ggml_type: str) -> tuple[int, int]:
    """(block size in elements, bytes per block) of a ggml type (ggml/src/ggml.c, type_traits)."""
    known = KV_CACHE_TYPES.get(ggml_type.upper())
    if known is not None:
        return known
    try:
        return gguf_package().type_sizes[ggml_type.upper()]
    except KeyError:
        names = ", ".join(sorted(gguf_package().type_sizes))
        raise KeyError(f"unknown ggml type {ggml_type!r}; expected one of {names}") from None


def row_bytes(ggml_type: str, n: int) -> int:
    """ggml_row_size: bytes of n elements of a type (n a multiple of the block size)."""
    block, size = ggml_type_size(ggml_type)
    return size * n // block


def tensor_bytes(ggml_type: str, shape: Sequence[int]) -> int:
    """ggml_nbytes of a contiguous tensor."""
    return row_bytes(ggml_type, shape[0]) * math.prod(shape[1:]) if shape else 0


MAX_ARRAY = 4096


@cache
def gguf_package() -> type[GGUFPackage]:
    """The ``gguf`` package's reader and tables (``fleetgate.models.gguf_package``), imported on first use."""
    # Lazy, fleetgate's one import of gguf: it imports numpy (about 160 ms), which sizing a KV cache, reading a
    # profile or running a seam never needs; only a header read or an uncommon quantisation type does.
    from fleetgate.models.gguf_package import GGUFPackage

    return GGUFPackage


# the fewest bytes one key/value and one tensor description take in a GGUF v2/v3 header
# (ggml/src/gguf.cpp: a key is a u64 length and its bytes, a u32 type and a value; a tensor's name, n_dims,
# at least one u64 dimension, a u32 type and a u64 offset)
MIN_KV_BYTES = 8 + 1 + 4 + 1
MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8


def _check_counts(path: Path, start: bytes, size: int) -> None:
    """The header's tensor and key counts against the file's size, before anything is sized by them."""
    if len(start) < 24:
        raise InputError(path, None, f"truncated GGUF header: {len(start)} bytes; expected at least 24")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", start, 4)
    if version not in (2, 3):
        raise InputError(path, None, f"GGUF version {version}; expected 2 or 3 (little-endian)")
    if 24 + n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_BYTES > size:
        raise InputError(path, None, f"the header claims {n_tensors} tensors and {n_kv} keys, more than the "
                                     f"file's {size} bytes can hold; expected a whole, unaltered GGUF")


def read_header(path: Path | str) -> Header:
    """Read a GGUF header; a file that is not a whole GGUF is one ``InputError`` line."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(path, None, f"cannot read the GGUF: {exc.strerror}") from None
    if not path.is_file():
        raise InputError(path, None, "not a file; expected a GGUF model")
    with path.open("rb") as handle:
        start = handle.read(24)
    magic = start[:4]
    if magic != b"GGUF":
        raise InputError(path, None, f"not a GGUF file: starts with {magic!r}, expected b'GGUF'")
    _check_counts(path, start, size)
    try:
        reader = gguf_package().reader(path, MAX_ARRAY)
    except Exception as exc:
        raise InputError(path, None, f"unreadable GGUF header ({type(exc).__name__}: {exc}); "
                                     "expected a complete file (a truncated copy fails to map)") from None
    fields: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if field.types and field.types[0].name == "ARRAY" and not field.data and len(field.parts) >= 5:
            # a long array stepped over by _Reader: parts are [key length, key, type, item type, length]
            fields[name] = {"array_length": int(field.parts[4][0])}
            continue
        try:
            fields[name] = field.contents()
        except Exception:
            continue
    tensors = []
    for tensor in reader.tensors:
        shape = tuple(int(d) for d in tensor.shape)
        tensors.append(TensorInfo(
            name=tensor.name,
            ggml_type=tensor.tensor_type.name,
            shape=shape,
            nbytes=int(tensor.n_bytes),
            offset=int(tensor.data_offset) - int(reader.data_offset),
        ))
    return Header(path=path, file_bytes=size, data_offset=int(reader.data_offset), fields=fields,
                  tensors=tuple(tensors))


MAX_BLOCKS = 1 << 16


def _block_count(header: Header) -> int:
    """block_count, checked against the tensors the file holds before anything is sized by it."""
    n_all = header.number("block_count")
    blocks = [int(t.name.split(".")[1]) for t in header.tensors
              if t.name.startswith("blk.") and t.name.split(".")[1].isdigit()]
    top = max(blocks, default=-1) + 1
    if n_all > MAX_BLOCKS or (blocks and n_all > top):
        raise InputError(header.path, None, f"{header.architecture}.block_count is {n_all} but the file's "
                                            f"tensors stop at blk.{top - 1}; expected at most {top}")
    return n_all


def _per_block(value: Any, n: int, what: str, path: Path) -> list[int]:
    def one(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(path, None, f"{what} holds {v!r}; expected unsigned integers")
        return v

    if value is None:
        return [0] * n
    if isinstance(value, list):
        if len(value) != n:
            raise InputError(path, None, f"{what} has {len(value)} entries, expected one per block ({n})")
        return [one(v) for v in value]
    return [one(value)] * n


def layer_pattern(header: Header) -> str:
    """One letter per block (A attention, S sliding window, R recurrent, N nextn), as build 11434 reads it."""
    arch = header.architecture
    path = header.path
    n_all = header.number("block_count", 0)
    nextn = header.number("nextn_predict_layers", 0)
    n_layer = n_all - nextn
    if arch in UNMODELLED_MEMORY:
        raise InputError(path, None, f"architecture {arch!r}: fleetgate does not model this architecture's "
                                     "recurrent memory yet; expected a transformer, a qwen35-family hybrid "
                                     "or a drafter")
    kinds = ["A"] * n_layer
    if arch in HYBRID_ARCHS:
        explicit = header.arch_key("attention.recurrent_layers")
        if isinstance(explicit, list):
            flags = [bool(v) for v in explicit][:n_layer]
        else:
            interval = header.number("full_attention_interval", 4) or 4
            flags = [(il + 1) % interval != 0 for il in range(n_layer)]
        kinds = ["R" if flag else "A" for flag in flags]
    window = header.number("attention.sliding_window", 0)
    if window > 0 and arch not in HYBRID_ARCHS:
        pattern = header.arch_key("attention.sliding_window_pattern")
        if isinstance(pattern, list):
            kinds = ["S" if bool(v) else "A" for v in pattern[:n_layer]]
        else:
            if pattern is not None:
                period, dense_first = int(pattern), False
            elif arch in SWA_DEFAULT_PERIOD:
                period, dense_first = SWA_DEFAULT_PERIOD[arch]
            else:
                raise InputError(path, None, f"architecture {arch!r} has a sliding window of {window} but "
                                             "no sliding_window_pattern, and fleetgate does not know its "
                                             f"default; expected {arch}.attention.sliding_window_pattern")
            for il in range(n_layer):
                if dense_first:
                    swa = period == 0 or il % period != 0
                else:
                    swa = period == 0 or il % period < period - 1
                kinds[il] = "S" if swa else "A"
    return "".join(kinds) + "N" * nextn


def profile_data(header: Header) -> dict[str, Any]:
    """The profile (as TOML-ready data) of a GGUF: what the ledger and the seams read."""
    arch = header.architecture
    if not arch:
        raise InputError(header.path, None, "no general.architecture key; expected a llama.cpp GGUF")
    n_all = header.arch_key("block_count")
    is_projector = arch == "clip"
    model: dict[str, Any] = {
        "name": str(header.fields.get("general.name") or header.path.stem),
        "source": "gguf",
        "file": header.path.name,
        "file_bytes": header.file_bytes,
        "data_offset": header.data_offset,
        "architecture": arch,
    }
    data: dict[str, Any] = {"model": model}
    if not is_projector:
        if n_all is None:
            raise InputError(header.path, None, f"no {arch}.block_count key; expected a llama.cpp model GGUF")
        n_all = _block_count(header)
        nextn = header.number("nextn_predict_layers", 0)
        vocab = header.number("vocab_size") if header.arch_key("vocab_size") is not None else None
        if vocab is None:
            tokens = header.fields.get("tokenizer.ggml.tokens")
            vocab = tokens["array_length"] if isinstance(tokens, dict) else (len(tokens) if tokens else None)
        ctx_train = header.number("context_length") if header.arch_key("context_length") is not None else None
        scaling = header.arch_key("rope.scaling.type")
        model.update({
            "block_count": n_all,
            "nextn_layers": nextn,
            "n_embd": header.number("embedding_length", 0),
        })
        if vocab is not None:
            model["n_vocab"] = int(vocab)
        if ctx_train is not None:
            model["n_ctx_train"] = int(ctx_train)
        model["rope_scaling"] = str(scaling) if scaling is not None else "none"
        factor = header.arch_key("rope.scaling.factor")
        if factor:
            model["rope_scaling_factor"] = float(factor)

        head_count = _per_block(header.arch_key("attention.head_count"), n_all, "head_count", header.path)
        head_kv = header.arch_key("attention.head_count_kv")
        kv = _per_block(head_kv, n_all, "head_count_kv", header.path) if head_kv is not None else head_count
        n_embd = model["n_embd"]
        default_head = n_embd // head_count[0] if head_count and head_count[0] else 0
        key_length = header.number("attention.key_length", default_head)
        value_length = header.number("attention.value_length", default_head)
        attention: dict[str, Any] = {
            "head_count_kv": kv[0] if len(set(kv)) == 1 else kv,
            "key_length": key_length,
            "value_length": value_length,
        }
        window = header.number("attention.sliding_window", 0)
        if window:
            attention["sliding_window"] = window
            attention["key_length_swa"] = header.number("attention.key_length_swa", key_length) or key_length
            attention["value_length_swa"] = header.number("attention.value_length_swa", value_length) or value_length
        causal = header.arch_key("attention.causal")
        if causal is not None:
            attention["causal"] = bool(causal)
        data["attention"] = attention
        data["layers"] = {"pattern": layer_pattern(header)}
        if arch in HYBRID_ARCHS:
            data["recurrent"] = {
                "conv_kernel": header.number("ssm.conv_kernel"),
                "inner_size": header.number("ssm.inner_size"),
                "state_size": header.number("ssm.state_size"),
                "group_count": header.number("ssm.group_count"),
                "rollback": arch in RS_ROLLBACK_ARCHS,
            }
        if arch == "dflash":
            drafter: dict[str, Any] = {"block_size": header.number("block_size", 16)}
            if window:
                drafter["sliding_window"] = window
            targets = header.arch_key("target_layers")
            if isinstance(targets, list):
                drafter["target_layers"] = [int(t) for t in targets]
            anchor = header.arch_key("sample_from_anchor")
            if anchor is not None:
                drafter["sample_from_anchor"] = anchor == "true" if isinstance(anchor, str) else bool(anchor)
            data["drafter"] = drafter
    data["weights"] = {"tensors": [
        {"name": t.name, "type": t.ggml_type, "shape": list(t.shape), "offset": t.offset}
        for t in header.tensors
    ]}
    return data


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to a profile")


def profile_toml(data: Mapping[str, Any], *, comment: str = "") -> str:
    """Render profile data as TOML (tables in a fixed order, tensors one inline table a line)."""
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    for table in ("model", "attention", "layers", "recurrent", "drafter", "weights"):
        if table not in data:
            continue
        lines.append(f"\n[{table}]" if lines else f"[{table}]")
        for key, value in data[table].items():
            if key == "tensors":
                lines.append("# every tensor of the file: ggml type, shape (ne0 first), offset in the data")
                lines.append("tensors = [")
                lines += [f"    {_value(t)}," for t in value]
                lines.append("]")
            else:
                lines.append(f"{key} = {_value(value)}")
    return "\n".join(lines) + "\n"
