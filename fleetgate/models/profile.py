"""Model profiles: what the seams and the ledger need to know about a GGUF, as TOML.

A profile is written by ``fleetgate profile MODEL.gguf`` from the GGUF header (``source = "gguf"``: every
tensor with its type, shape and offset), or reconstructed by hand from published figures
(``source = "reconstructed"``: bytes per block kind instead of tensors) when the file is not at hand.
A service may also point straight at the GGUF; it is then read the same way, header only.

Tables (see fleetgate/models/gguf.py for how a GGUF's keys resolve into them):

- ``[model]`` name, source, architecture, block_count (nextn blocks included), nextn_layers, n_embd,
  n_vocab, n_ctx_train, rope_scaling, file_bytes, data_offset
- ``[attention]`` head_count_kv (one number or one per block), key_length, value_length,
  sliding_window, key_length_swa, value_length_swa
- ``[layers] pattern`` one letter per block: A full attention, S sliding window, R recurrent, N nextn
- ``[recurrent]`` conv_kernel, inner_size, state_size, group_count, rollback (hybrid models)
- ``[drafter]`` block_size, sliding_window, target_layers (block-diffusion drafters)
- ``[weights]`` ``tensors = [...]`` (from a GGUF), or reconstructed bytes: token_embd, output,
  output_norm, and per block kind attention_block / swa_block / recurrent_block / nextn_block (or a
  ``blocks`` list), or ``total`` for a projector
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from fleetgate.errors import InputError, parse_toml
from fleetgate.models.gguf import ggml_type_size, profile_data, read_header, tensor_bytes
from fleetgate.toml_keys import locate_key

__all__ = ["DrafterInfo", "Profile", "Recurrent", "Weight", "load_profile", "profile_from_data"]

Role = Literal["input", "output", "block"]

# Tensors that llama.cpp keeps with the input layer, on the host (src/llama-arch.cpp, LLM_TENSOR_INFOS:
# LLM_TENSOR_LAYER_INPUT); every other non-block tensor belongs to the output layer.
INPUT_TENSORS = frozenset({"token_embd", "position_embd", "token_types", "per_layer_token_embd"})
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Weight:
    """One tensor of the model (or, in a reconstructed profile, one block's bytes)."""

    name: str
    ggml_type: str | None
    """None for a reconstructed lump: no per-row padding can be applied to it."""
    shape: tuple[int, ...]
    nbytes: int
    offset: int | None
    role: Role
    block: int | None = None
    duplicate: bool = False
    """A second copy of a tensor the file holds once (tied token embeddings used as the output head)."""


@dataclass(frozen=True)
class Recurrent:
    conv_kernel: int
    inner_size: int
    state_size: int
    group_count: int
    rollback: bool
    """The architecture keeps n_rs_seq rollback snapshots for a drafter (llm_arch_supports_rs_rollback)."""

    @property
    def n_embd_r(self) -> int:
        """Conv state floats per row (src/llama-hparams.cpp, ``n_embd_r``)."""
        return max(self.conv_kernel - 1, 0) * (self.inner_size + 2 * self.group_count * self.state_size)

    @property
    def n_embd_s(self) -> int:
        """SSM state floats per row (src/llama-hparams.cpp, ``n_embd_s``)."""
        return self.state_size * self.inner_size

    @property
    def row_bytes(self) -> int:
        """One sequence's state on one layer: both F32 rows (src/llama-memory-recurrent.cpp)."""
        return 4 * (self.n_embd_r + self.n_embd_s)


@dataclass(frozen=True)
class DrafterInfo:
    block_size: int | None
    """Block-diffusion drafters draft at most block_size - 1 tokens (common/speculative.cpp)."""
    sliding_window: int | None


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    source: str
    architecture: str
    n_ctx_train: int | None
    rope_scaling: str | None
    drafter: DrafterInfo | None
    raw: dict[str, Any]
    block_count: int = 0
    nextn_layers: int = 0
    n_embd: int = 0
    n_vocab: int = 0
    file_bytes: int | None = None
    file: str | None = None
    """The model file's name (``fleetgate profile`` writes the GGUF's; a reconstructed profile names the Hub's)."""
    data_offset: int | None = None
    pattern: str = ""
    head_count_kv: tuple[int, ...] = ()
    key_length: int = 0
    value_length: int = 0
    key_length_swa: int = 0
    value_length_swa: int = 0
    sliding_window: int = 0
    recurrent: Recurrent | None = None
    weights: tuple[Weight, ...] = field(default=(), repr=False)

    @property
    def reconstructed(self) -> bool:
        return self.source != "gguf"

    @property
    def n_layer(self) -> int:
        """Blocks of the trunk: block_count without the nextn blocks (src/llama-hparams.cpp, ``n_layer``)."""
        return self.block_count - self.nextn_layers

    def kind(self, il: int) -> str:
        return self.pattern[il] if il < len(self.pattern) else "A"

    def is_swa(self, il: int) -> bool:
        return self.sliding_window > 0 and self.kind(il) == "S"

    def kv_row_elements(self, il: int) -> tuple[int, int]:
        """(n_embd_k_gqa, n_embd_v_gqa) of a block (src/llama-hparams.cpp)."""
        heads = self.head_count_kv[il] if il < len(self.head_count_kv) else 0
        if self.is_swa(il):
            return heads * self.key_length_swa, heads * self.value_length_swa
        return heads * self.key_length, heads * self.value_length

    @property
    def weight_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights)


def _where(path: Path, text: str, keys: tuple[str, ...]) -> int | None:
    return locate_key(text, keys) if text else None


def _int(data: Mapping[str, Any], key: str, path: Path, text: str, table: str,
         default: int | None = None) -> int:
    value = data.get(key, default)
    if value is None:
        raise InputError(path, _where(path, text, (table,)), f"[{table}] has no {key}; expected an integer")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(path, _where(path, text, (table, key)),
                         f"[{table}] {key} = {value!r}; expected an integer >= 0")
    return value


def _role(name: str) -> tuple[Role, int | None]:
    match = _BLOCK.match(name)
    if match:
        return "block", int(match.group(1))
    stem = name.split(".", 1)[0]
    return ("input" if stem in INPUT_TENSORS else "output"), None


def _tensor_weights(tensors: list[Any], path: Path, text: str) -> tuple[Weight, ...]:
    weights = []
    for i, entry in enumerate(tensors):
        if not isinstance(entry, dict) or not {"name", "type", "shape"} <= entry.keys():
            raise InputError(path, _where(path, text, ("weights", "tensors")),
                             f"[weights] tensors[{i}] = {entry!r}; expected {{ name, type, shape, offset }}")
        shape = tuple(int(d) for d in entry["shape"])
        try:
            ggml_type_size(str(entry["type"]))
            nbytes = tensor_bytes(str(entry["type"]), shape)
        except KeyError as exc:
            raise InputError(path, _where(path, text, ("weights", "tensors")),
                             f"[weights] tensors[{i}] ({entry['name']}): {exc.args[0]}") from None
        role, block = _role(str(entry["name"]))
        weights.append(Weight(name=str(entry["name"]), ggml_type=str(entry["type"]).upper(), shape=shape,
                              nbytes=nbytes, offset=entry.get("offset"), role=role, block=block))
    return tuple(weights)


_KIND_KEYS = {"A": "attention_block", "S": "swa_block", "R": "recurrent_block", "N": "nextn_block"}


def _reconstructed_weights(weights: Mapping[str, Any], pattern: str, path: Path,
                           text: str) -> tuple[Weight, ...]:
    """One lump per block and per global tensor, from bytes per block kind."""
    lumps: list[Weight] = []
    for key, role in (("token_embd", "input"), ("output", "output"), ("output_norm", "output")):
        if key in weights:
            lumps.append(Weight(name=key, ggml_type=None, shape=(), offset=None, role=role,  # type: ignore[arg-type]
                                nbytes=_int(weights, key, path, text, "weights")))
    if "total" in weights:
        lumps.append(Weight(name="weights", ggml_type=None, shape=(), offset=None, role="output",
                            nbytes=_int(weights, "total", path, text, "weights")))
    explicit = weights.get("blocks")
    if explicit is not None:
        if not isinstance(explicit, list) or len(explicit) != len(pattern):
            raise InputError(path, _where(path, text, ("weights", "blocks")),
                             f"[weights] blocks has {len(explicit) if isinstance(explicit, list) else 'no'} "
                             f"entries; expected one per block ({len(pattern)})")
        sizes = [int(v) for v in explicit]
    else:
        sizes = []
        for il, kind in enumerate(pattern):
            key = _KIND_KEYS[kind]
            if key not in weights and kind == "S" and "attention_block" in weights:
                key = "attention_block"
            if key not in weights:
                raise InputError(path, _where(path, text, ("weights",)),
                                 f"[weights] has no {key} for block {il} (pattern {kind!r}); expected the "
                                 "bytes of each block kind, or a blocks list")
            sizes.append(_int(weights, key, path, text, "weights"))
    for il, size in enumerate(sizes):
        lumps.append(Weight(name=f"blk.{il}", ggml_type=None, shape=(), nbytes=size, offset=None,
                            role="block", block=il))
    return tuple(lumps)


_PATTERN = re.compile(r"^[ASRN]*$")


def profile_from_data(data: dict[str, Any], path: Path, text: str = "") -> Profile:
    """Build a Profile from parsed TOML (or from a GGUF header's profile data)."""
    model = data.get("model")
    if not isinstance(model, dict) or "architecture" not in model or "name" not in model:
        raise InputError(path, None, "expected a [model] table with at least name and architecture")
    source = str(model.get("source", "gguf"))
    arch = str(model["architecture"])
    drafter_raw = data.get("drafter")
    attention = data.get("attention", {})
    if not isinstance(attention, dict):
        raise InputError(path, _where(path, text, ("attention",)), "expected [attention] to be a table")
    window = _int(attention, "sliding_window", path, text, "attention", 0)
    if window == 0 and isinstance(drafter_raw, dict) and drafter_raw.get("sliding_window"):
        window = _int(drafter_raw, "sliding_window", path, text, "drafter")
    drafter = None
    if isinstance(drafter_raw, dict):
        drafter = DrafterInfo(block_size=drafter_raw.get("block_size"), sliding_window=window or None)

    block_count = _int(model, "block_count", path, text, "model", 0)
    nextn = _int(model, "nextn_layers", path, text, "model", 0)
    layers = data.get("layers", {})
    pattern = str(layers.get("pattern", "")) if isinstance(layers, dict) else ""
    if pattern and (not _PATTERN.match(pattern) or len(pattern) != block_count):
        raise InputError(path, _where(path, text, ("layers", "pattern")),
                         f"[layers] pattern {pattern!r} has {len(pattern)} letters; expected one of A/S/R/N "
                         f"per block ({block_count})")
    if not pattern and block_count:
        pattern = "A" * (block_count - nextn) + "N" * nextn
    heads_raw = attention.get("head_count_kv", 0)
    if isinstance(heads_raw, list):
        if len(heads_raw) != block_count:
            raise InputError(path, _where(path, text, ("attention", "head_count_kv")),
                             f"[attention] head_count_kv has {len(heads_raw)} entries; "
                             f"expected {block_count}")
        heads = tuple(int(h) for h in heads_raw)
    else:
        heads = (_int(attention, "head_count_kv", path, text, "attention", 0),) * block_count
    key_length = _int(attention, "key_length", path, text, "attention", 0)
    value_length = _int(attention, "value_length", path, text, "attention", key_length)

    recurrent = None
    rec_raw = data.get("recurrent")
    if isinstance(rec_raw, dict):
        recurrent = Recurrent(
            conv_kernel=_int(rec_raw, "conv_kernel", path, text, "recurrent"),
            inner_size=_int(rec_raw, "inner_size", path, text, "recurrent"),
            state_size=_int(rec_raw, "state_size", path, text, "recurrent"),
            group_count=_int(rec_raw, "group_count", path, text, "recurrent"),
            rollback=bool(rec_raw.get("rollback", False)),
        )
    elif "R" in pattern:
        raise InputError(path, _where(path, text, ("layers", "pattern")),
                         "[layers] pattern has recurrent blocks (R) but there is no [recurrent] table; "
                         "expected conv_kernel, inner_size, state_size and group_count")

    weights_raw = data.get("weights", {})
    if not isinstance(weights_raw, dict):
        raise InputError(path, _where(path, text, ("weights",)), "expected [weights] to be a table")
    if "tensors" in weights_raw:
        weights = _tensor_weights(list(weights_raw["tensors"]), path, text)
    elif weights_raw:
        weights = _reconstructed_weights(weights_raw, pattern, path, text)
    else:
        weights = ()

    return Profile(
        path=path,
        name=str(model["name"]),
        source=source,
        architecture=arch,
        n_ctx_train=model.get("n_ctx_train"),
        rope_scaling=model.get("rope_scaling"),
        drafter=drafter,
        raw=data,
        block_count=block_count,
        nextn_layers=nextn,
        n_embd=_int(model, "n_embd", path, text, "model", 0),
        n_vocab=_int(model, "n_vocab", path, text, "model", 0),
        file_bytes=model.get("file_bytes"),
        file=str(model["file"]) if model.get("file") else None,
        data_offset=model.get("data_offset"),
        pattern=pattern,
        head_count_kv=heads,
        key_length=key_length,
        value_length=value_length,
        key_length_swa=_int(attention, "key_length_swa", path, text, "attention", key_length),
        value_length_swa=_int(attention, "value_length_swa", path, text, "attention", value_length),
        sliding_window=window,
        recurrent=recurrent,
        weights=weights,
    )




def _is_gguf(path: Path) -> bool:
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


@cache
def _load(path: Path, stamp: tuple[int, int]) -> Profile:
    if _is_gguf(path):
        return profile_from_data(profile_data(read_header(path)), path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, f"cannot read profile: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(path, None, "not a text file; expected a profile (TOML) or a GGUF") from None
    return profile_from_data(parse_toml(text, path), path, text)


def load_profile(path: Path) -> Profile:
    """A profile from TOML or straight from a GGUF header (cached per file version)."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise InputError(path, None, f"cannot read profile: {exc.strerror}") from None
    return _load(path.resolve(), (stat.st_mtime_ns, stat.st_size))
