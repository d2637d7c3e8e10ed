"""Which device holds each block of a model, and its output layer.

- Layer placement (src/llama-model.cpp, ``llama_model_base::load_tensors``): split points are the
  cumulative ``--tensor-split`` normalised to 1 (float32), or the devices' memory when no split is given;
  block ``il`` goes to ``upper_bound(splits, (il - i_gpu_start) / act_gpu_layers)`` with
  ``i_gpu_start = max(n_layer_all + 1 - ngl, 0)`` and ``act_gpu_layers = min(ngl, n_layer_all + 1)``; the
  output layer is ``il = n_layer_all``; the input layer (token embeddings) always stays on the host; blocks
  past the model's layers go with the output (``create_tensor``). ``--split-mode none`` keeps only the main
  device and RPC devices come first (src/llama.cpp, ``llama_model_load_from_file_impl``).
- Tensor overrides (``-ot``, ``--cpu-moe``, ``--n-cpu-moe``, ``--n-cpu-ffn``; fleetgate/ledger/overrides.py) move
  single tensors off their layer's device: the buffer type each names is resolved here to a device of the
  command line (common/arg.cpp ``parse_tensor_buffer_overrides`` knows every device's own buffer type, and the
  host's ``CPU``).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from fleetgate.engines.llamacpp import LlamaServerConfig
from fleetgate.ledger.accounts import Refusal
from fleetgate.ledger.devices import HOST, Card
from fleetgate.ledger.options import option_value
from fleetgate.ledger.overrides import TensorOverride, tensor_overrides
from fleetgate.models.profile import Profile

__all__ = ["Devices", "PlacedModel", "devices_of", "n_gpu_layers", "place", "place_target", "placement",
           "resolve_overrides"]


def _f32(value: float) -> float:
    """Round to IEEE float32: the engine does its split arithmetic in float."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def placement(n_layer_all: int, n_gpu_layers: int, weights: Sequence[float], n_devices: int) -> list[int]:
    """Device index of each block and (last) of the output layer; -1 is the host.

    Mirrors src/llama-model.cpp, ``load_tensors``: splits are float cumulative sums normalised by their
    total, and ``upper_bound`` picks the first split strictly above ``(il - i_gpu_start) / act``.
    """
    if n_devices == 0:
        return [-1] * (n_layer_all + 1)
    splits = []
    total = _f32(0.0)
    for w in weights:
        total = _f32(total + _f32(w))
        splits.append(total)
    splits = [_f32(s / total) for s in splits]
    i_gpu_start = max(n_layer_all + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer_all + 1)
    devices = []
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or (il - i_gpu_start) >= act:
            devices.append(-1)
            continue
        x = _f32(_f32(il - i_gpu_start) / act)
        devices.append(min(next((i for i, s in enumerate(splits) if s > x), n_devices), n_devices - 1))
    return devices


def n_gpu_layers(value: str, n_layer_all: int) -> int:
    """``-ngl``: a count, or auto/all/negative: every layer plus the output (llama_model::n_gpu_layers)."""
    try:
        n = int(value)
    except ValueError:
        return n_layer_all + 1
    return n_layer_all + 1 if n < 0 else n


@dataclass(frozen=True)
class PlacedModel:
    """A model placed on devices: which device holds each block and the output layer."""

    profile: Profile
    devices: tuple[Card, ...]
    layer_device: tuple[Card, ...]
    output_device: Card
    load_mtp: bool
    ngl: int
    """The layers offloaded (``-ngl`` read as the engine reads it)."""
    overrides: tuple[tuple[TensorOverride, Card], ...] = ()
    """The tensor overrides in the order the loader tries them, each with the device its buffer type is on."""

    @property
    def cards(self) -> list[Card]:
        """The devices holding blocks or the output layer, then those holding only overridden tensors."""
        seen: list[Card] = []
        for card in (*self.layer_device, self.output_device, *(card for _, card in self.overrides)):
            if card not in seen:
                seen.append(card)
        return seen


def _model_devices(cards: Sequence[Card], names: Sequence[str], split_mode: str, main_gpu: int,
                   rpc: Sequence[Card]) -> list[Card]:
    known = {c.name: c for c in (*cards, *rpc)} | {c.label: c for c in (*cards, *rpc)}
    if [n.lower() for n in names] == ["none"]:
        devices: list[Card] = []
    elif names:
        devices = []
        for name in names:
            if name not in known:
                raise KeyError(name)
            devices.append(known[name])
    else:
        devices = [*rpc, *cards]
    if split_mode == "none" and devices:
        devices = [devices[main_gpu if 0 <= main_gpu < len(devices) else 0]]
    return devices


@dataclass(frozen=True)
class Devices:
    """The devices of one command line: the host's cards (in enumeration order), the ``--rpc`` devices,
    ``--main-gpu``, and the devices the target is placed on (``--device`` picks among them)."""

    cards: tuple[Card, ...]
    rpc: tuple[Card, ...]
    main_gpu: int
    used: tuple[Card, ...]

    def pick(self, names: Sequence[str], split_mode: str) -> list[Card]:
        """The devices a ``--device``-style list names, under this split mode (KeyError for an unknown name)."""
        return _model_devices(self.cards, names, split_mode, self.main_gpu, self.rpc)


def devices_of(config: LlamaServerConfig, cards: Sequence[Card]) -> Devices:
    """The host's cards and ``--rpc``'s devices, and those ``--device`` and ``--split-mode`` place the target on.
    Raises ``KeyError`` for a ``--device`` name no card has."""
    rpc = [next((c for c in cards if c.endpoint == endpoint),
                Card(name=f"RPC{i}", vram_bytes=None, buffer_name=f"RPC0[{endpoint}]", endpoint=endpoint))
           for i, endpoint in enumerate(config.rpc)]
    host_cards = [c for c in cards if c.endpoint is None]
    main_gpu = int(option_value(config, "main_gpu", "0") or 0)
    devices = _model_devices(host_cards, config.devices, config.split_mode, main_gpu, rpc)
    return Devices(cards=tuple(host_cards), rpc=tuple(rpc), main_gpu=main_gpu, used=tuple(devices))


def place(profile: Profile, devices: Sequence[Card], ngl: int, tensor_split: Sequence[float],
          load_mtp: bool) -> PlacedModel:
    n_all = profile.block_count
    weights = list(tensor_split)[: len(devices)]
    if len(weights) < len(devices) or not any(weights):
        # no -ts: the engine splits by each device's free memory at boot; the card's size stands in for it
        weights = [float(c.vram_bytes or 1) for c in devices]
    cards = tuple(HOST if i < 0 else devices[i] for i in placement(n_all, ngl, weights, len(devices)))
    return PlacedModel(profile, tuple(devices), cards[:n_all], cards[n_all], load_mtp, ngl)


def resolve_overrides(overrides: Sequence[TensorOverride], devices: Devices, refusals: list[Refusal]
                      ) -> tuple[tuple[TensorOverride, Card], ...]:
    """Each override with the device of the buffer type it names: ``CPU`` is the host, any other name a device's
    own buffer type (``CUDA0``, ``RPC0[host:port]``), among every device the engine registered, used by the model or
    not. A name no device offers is a refusal in the engine's words (common/arg.cpp,
    ``parse_tensor_buffer_overrides``: "unknown buffer type"), and the override is left out."""
    known = {HOST.name: HOST} | {c.label: c for c in (*devices.rpc, *devices.cards)} \
        | {c.name: c for c in devices.cards}
    resolved = []
    for override in overrides:
        card = known.get(override.buffer_type)
        if card is None:
            refusals.append(Refusal(
                f"error while handling argument \"{override.flag.flag}\": unknown buffer type "
                f"{override.buffer_type!r} (the engine offers {', '.join(sorted(known))})", override.flag.dest,
                "common/arg.cpp parse_tensor_buffer_overrides"))
            continue
        resolved.append((override, card))
    return tuple(resolved)


def place_target(config: LlamaServerConfig, target: Profile, devices: Devices,
                 refusals: list[Refusal] | None = None) -> PlacedModel:
    """The target on its devices: ``-ngl`` layers offloaded, split by ``--tensor-split``; its nextn blocks
    loaded only for ``draft-mtp``; single tensors moved by the overrides (an override the engine refuses goes to
    ``refusals``)."""
    ngl = n_gpu_layers(config.n_gpu_layers, target.block_count)
    placed = place(target, devices.used, ngl, config.tensor_split, "draft-mtp" in set(config.spec_types))
    overrides = resolve_overrides(tensor_overrides(config), devices, [] if refusals is None else refusals)
    return dataclasses.replace(placed, overrides=overrides) if overrides else placed
