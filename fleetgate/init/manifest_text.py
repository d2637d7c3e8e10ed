"""``fleetgate init``'s output: the text of fleet.toml from a ``Discovery`` (and the probed host facts), with
``"TODO"`` and a comment for what no file can say. Nothing here writes a file: the CLI does."""

from __future__ import annotations

import json

from fleetgate.init.found import TODO, Discovery
from fleetgate.init.probe import HostFacts

__all__ = ["fleet_toml"]


# --- the manifest ------------------------------------------------------------------------------------------------


def _s(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def fleet_toml(discovery: Discovery, *, name: str, facts: HostFacts | None = None) -> str:
    """The manifest's text: what the files say, and ``"TODO"`` with a comment for what they cannot."""
    out = ["# Written by `fleetgate init` from the files of this repository. Each value says where it was read;",
           '# "TODO" marks what no file can say: fleet.toml is refused until it is edited.', "", "[fleet]",
           f"name = {_s(name)}"]
    if discovery.deploy_root is not None:
        out.append(f"# where the units find this repository on the host: {discovery.deploy_root_from}")
        out.append(f"deploy_root = {_s(discovery.deploy_root)}")
    out += ["", "[hosts.localhost]"]
    if facts is not None and facts.ram_gib is not None:
        out += ["# MemTotal of /proc/meminfo on the machine `fleetgate init --probe` ran on",
                f"ram_gib = {facts.ram_gib}"]
    else:
        out += ["# TODO: the host's RAM in GiB (MemTotal of /proc/meminfo; `fleetgate init --probe` on the host reads it)",
                f"ram_gib = {_s(TODO)}"]
    if facts is not None and facts.cards:
        out.append(f"# read by {facts.source}")
        out.append("devices = [")
        out += [f"    {{ name = {_s(c.name)}, vram_bytes = {c.vram_bytes} }},  # {c.model}" for c in facts.cards]
        out.append("]")
    else:
        out += ["# TODO: one entry per card, in the order the GPU runtime enumerates them: the engine's device name",
                "# (CUDA0, ROCm0, Vulkan0) and its VRAM in bytes (nvidia-smi --query-gpu=memory.total", "# "
                "--format=csv,noheader,nounits gives MiB: times 1048576); `fleetgate init --probe` on the host reads them.",
                "# A host without a GPU: devices = []",
                f"devices = [{{ name = {_s(TODO)}, vram_bytes = {_s(TODO)} }}]"]
    for found in discovery.services:
        out += ["", f"# found in {found.source}", f"[services.{found.name}]", 'host = "localhost"',
                f"port = {found.port}  # {found.port_from}", f"engine = {_s(found.engine)}"]
        for key in ("unit", "serve_script", "env_file", "compose", "compose_service", "llama_swap", "llama_swap_model",
                    "models_preset", "preset_model"):
            value = getattr(found, key)
            if value is not None:
                out.append(f"{key} = {_s(value)}")
        if found.models_max is not None:
            out.append(f"models_max = {found.models_max}  # the router's --models-max")
        if found.env_template is not None:
            out.append("# the unit's EnvironmentFile= is written on the host by this script from this template")
            out.append(f"env_file = {{ template = {_s(found.env_template[0])}, script = {_s(found.env_template[1])} }}")
        if found.payload:
            out.append(f"payload = [{', '.join(_s(p) for p in found.payload)}]")
        else:
            out.append("# payload: no model path of the argv is a host file; declare the files the host must hold")
    return "\n".join(out) + "\n"
