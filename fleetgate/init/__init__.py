"""``fleetgate init PATH...``: a fleet.toml written from the files a repository already holds.

Discovery walks the given paths (bounded; symlinks never followed out of the repository; ``.git``, virtual
environments and ``node_modules`` skipped) and reads each file the way its consumer reads it, with the readers the
suite already has:

- systemd units (``*.service``) and Quadlet ``*.container`` files, by ``fleetgate.units.parse_unit``: an
  ``ExecStart=`` that runs the engine itself is expanded as systemd expands it (``fleetgate.sources.systemd``); one
  that runs a serve script of the repository is rendered the way the seams render it (``fleetgate.render.dispatch``), so the
  port and the model come from the argv the script really builds;
- serve scripts whose engine is a ``docker run``/``podman run`` line: rendered in the sandbox (the client is a stub,
  ``fleetgate.sources.docker_run`` reads the recorded line); the port through ``-p``, the model through ``-v``;
- a unit's ``EnvironmentFile=`` outside the repository that one script of the repository writes from one template
  (``*.in``, ``*.tmpl``, ``*.template``) it names: ``env_file = { template, script }``, rendered for port and model;
- docker compose files (any YAML with a ``services:`` map whose entries have an ``image`` or a ``command``), by
  ``fleetgate.sources.compose`` (``list_services``, ``read_compose``);
- llama-swap configs (YAML with a ``models:`` map whose entries have a ``cmd``), by
  ``fleetgate.sources.llama_swap.read_config``; every model gets llama-swap's own port (default ``--listen :8080``).
- llama.cpp router presets (``*.ini`` in llama.cpp's preset grammar whose sections name a model), by
  ``fleetgate.sources.router_preset``; every model gets the router's port (llama-server's default 8080).

What no file can say (the host's RAM, its cards and their sizes) is written as ``"TODO"``, a value the schema
refuses: ``pytest seams/`` then names each one in one line, never judges with a guessed size. ``probe_host`` reads
them from ``nvidia-smi`` (or ``rocm-smi``) and ``/proc/meminfo`` of the machine it runs on, only when asked.

``discover`` reads, ``fleet_toml`` returns the manifest's text (every string escaped for TOML), and
``fleetgate.init.write`` puts it in place: loaded by fleetgate's own loader first, written to a new file and renamed
over the target, never opening what is there.
"""

from __future__ import annotations

from fleetgate.init.discover import discover
from fleetgate.init.found import TODO, Discovery, Found, Note
from fleetgate.init.manifest_text import fleet_toml
from fleetgate.init.probe import Card, HostFacts, probe_host

__all__ = [
    "TODO",
    "Card",
    "Discovery",
    "Found",
    "HostFacts",
    "Note",
    "discover",
    "fleet_toml",
    "probe_host",
]
