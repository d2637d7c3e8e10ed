"""``fleetgate init``'s output: the text of fleet.toml from a ``Discovery`` (and the probed host facts), with
``"TODO"`` and a comment for what no file can say. Nothing here writes a file: the CLI does."""

from __future__ import annotations

import re

from fleetgate.init.found import TODO, Discovery, visible
from fleetgate.init.probe import HostFacts

__all__ = ["fleet_toml", "toml_comment", "toml_key", "toml_string"]


# --- TOML, escaped: every string init writes comes from a file, a file's name or a tool's output -----------------

_TOML_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(value: str) -> str:
    """A TOML basic string: quotes and backslashes escaped, and every control character (TOML refuses them raw, DEL
    among them) written as its escape, so that no value can end its line or its string."""
    out = []
    for ch in value:
        code = ord(ch)
        if ch in _TOML_SHORT:
            out.append(_TOML_SHORT[ch])
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    """A key as TOML reads it back: bare when it may be, else a quoted string."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_comment(text: str) -> str:
    """A comment's text: no control character at all (a newline would end the comment and make the rest TOML), each
    shown as its escape."""
    return visible(text)


def fleet_toml(discovery: Discovery, *, name: str, facts: HostFacts | None = None) -> str:
    """The manifest's text: what the files say, and ``"TODO"`` with a comment for what they cannot."""
    out = ["# Written by `fleetgate init` from the files of this repository. Each value says where it was read;",
           '# "TODO" marks what no file can say: fleet.toml is refused until it is edited.', "", "[fleet]",
           f"name = {toml_string(name)}"]
    if discovery.deploy_root is not None:
        out.append(f"# where the units find this repository on the host: {toml_comment(discovery.deploy_root_from or '')}")
        out.append(f"deploy_root = {toml_string(discovery.deploy_root)}")
    out += ["", "[hosts.localhost]"]
    if facts is not None and facts.ram_gib is not None:
        out += ["# MemTotal of /proc/meminfo on the machine `fleetgate init --probe` ran on",
                f"ram_gib = {facts.ram_gib}"]
    else:
        out += ["# TODO: the host's RAM in GiB (MemTotal of /proc/meminfo; `fleetgate init --probe` on the host reads it)",
                f"ram_gib = {toml_string(TODO)}"]
    if facts is not None and facts.cards:
        out.append(f"# read by {toml_comment(facts.source)}")
        out.append("devices = [")
        out += [f"    {{ name = {toml_string(c.name)}, vram_bytes = {c.vram_bytes} }},  # {toml_comment(c.model)}" for c in facts.cards]
        out.append("]")
    else:
        out += ["# TODO: one entry per card, in the order the GPU runtime enumerates them: the engine's device name",
                "# (CUDA0, ROCm0, Vulkan0) and its VRAM in bytes (nvidia-smi --query-gpu=memory.total", "# "
                "--format=csv,noheader,nounits gives MiB: times 1048576); `fleetgate init --probe` on the host reads them.",
                "# A host without a GPU: devices = []",
                f"devices = [{{ name = {toml_string(TODO)}, vram_bytes = {toml_string(TODO)} }}]"]
    for found in discovery.services:
        out += ["", f"# found in {toml_comment(found.source)}", f"[services.{toml_key(found.name)}]", 'host = "localhost"',
                f"port = {found.port}  # {toml_comment(found.port_from)}", f"engine = {toml_string(found.engine)}"]
        for key in ("unit", "serve_script", "env_file", "compose", "compose_service", "kubernetes", "kubernetes_workload",
                    "kubernetes_container", "nix_unit", "llama_swap", "llama_swap_model",
                    "models_preset", "preset_model"):
            value = getattr(found, key)
            if value is not None:
                out.append(f"{key} = {toml_string(value)}")
        if found.ansible_vars:
            out.append("# the template's variables beyond the role's defaults and group_vars/all: the only file that sets each")
            out.append(f"ansible_vars = [{', '.join(toml_string(v) for v in found.ansible_vars)}]")
        if found.models_max is not None:
            out.append(f"models_max = {found.models_max}  # the router's --models-max")
        if found.env_template is not None:
            out.append("# the unit's EnvironmentFile= is written on the host by this script from this template")
            out.append(f"env_file = {{ template = {toml_string(found.env_template[0])}, script = {toml_string(found.env_template[1])} }}")
        if found.payload:
            out.append(f"payload = [{', '.join(toml_string(p) for p in found.payload)}]")
        else:
            out.append("# payload: no model path of the argv is a host file; declare the files the host must hold")
    return "\n".join(out) + "\n"
