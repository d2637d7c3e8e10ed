"""The chat template a llama-server will use, found the way llama-server finds it, and what it renders.

llama-server takes its template (common/arg.cpp, tools/server/server-context.cpp) from, in this order:

- ``--chat-template-file PATH`` (``LLAMA_ARG_CHAT_TEMPLATE_FILE``): the file's text; a file it cannot open stops it
  at start ("error: failed to open file");
- ``--chat-template TEXT`` (``LLAMA_ARG_CHAT_TEMPLATE``): under ``--jinja`` any Jinja text, else one of the builtin
  names (``chatml``, ``llama3``, ...), whose text is compiled into llama.cpp and not held here;
- the model's own ``tokenizer.chat_template`` from its GGUF header.

Whether a template describes tools is judged as build 11434 judges it (common/jinja/caps.cpp, the ``supports_tools``
capability): rendered with one tool ``tool1`` offered, the template must use the tool's name; one that never does
leaves llama-server to describe the tools its own way ("Template supports tool calls but does not natively describe
tools. The fallback behaviour used may produce bad results", common/chat.cpp). The template is rendered with Python's
jinja2 in its sandbox, not with llama.cpp's own Jinja engine: a template that jinja2 cannot render is "not judged",
never a guess.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgate.errors import InputError
from fleetgate.models.gguf import read_header
from fleetgate.render.origins import map_to_repo

if TYPE_CHECKING:
    from fleetgate.engines.llamacpp import LlamaServerConfig
    from fleetgate.fleet import Fleet

__all__ = ["PROBE_TOOL", "ChatTemplate", "describes_tools", "find_template"]

PROBE_TOOL = "tool1"
"""The tool name build 11434's capability probe offers (common/jinja/caps.cpp)."""
MAX_TEMPLATE = 1 << 20
"""Bytes of a template file read at most: real templates are a few KiB; a larger file is not read."""
_GGUF_KEY = "tokenizer.chat_template"


@dataclass(frozen=True)
class ChatTemplate:
    """The template a service's llama-server will use, as far as the files say."""

    origin: str
    """``file`` (``--chat-template-file``), ``inline`` (``--chat-template`` Jinja text), ``builtin`` (a builtin
    name), ``gguf`` (the model's own)."""
    what: str
    """The template named for a person: the file, the builtin's name, the GGUF."""
    text: str | None
    """Its text, or None when it cannot be read here (``unread`` says why)."""
    repository_file: Path | None = None
    """The repository file a ``--chat-template-file`` path is, where the repository is deployed there."""
    missing: bool = False
    """A ``--chat-template-file`` path inside the deployed repository that the repository does not hold."""
    unread: str | None = None
    """Why the text is not read: what to declare instead (a not-judged line's tail)."""


def _read_file(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TEMPLATE + 1)
    except OSError:
        return None
    if len(data) > MAX_TEMPLATE:
        return None
    return data.decode("utf-8", errors="replace")


def find_template(llama: LlamaServerConfig | None, fleet: Fleet, host_path: Callable[[str], str]) -> ChatTemplate | None:
    """The template of a llama-server service (None for another engine): ``host_path`` maps the engine's path to the
    host's (a container's bind mounts). Reads the repository's template file, or the model's GGUF header when the
    model is a file on this machine; never the network."""
    if llama is None:
        return None
    given = llama.use("chat_template_file")
    if given is not None and given.value:
        path = host_path(given.value)
        local = map_to_repo(fleet, path)
        if local is None and os.path.isabs(path) and fleet.root.resolve() in Path(path).resolve().parents:
            local = Path(path)  # a script run by its own path (no deploy_root) names the checkout's file
        if local is None:
            return ChatTemplate("file", path, None, unread=(
                f"--chat-template-file {path} lies outside the repository"
                + (f" (deployed at {fleet.deploy_root})" if fleet.deploy_root else " (fleet.toml declares no deploy_root)")
                + ": keep the template in the repository (and declare deploy_root) so that it can be read"))
        if not local.is_file():
            return ChatTemplate("file", path, None, repository_file=local, missing=True)
        text = _read_file(local)
        if text is None:
            return ChatTemplate("file", path, None, repository_file=local,
                                unread=f"{local.name} cannot be read as a template of at most {MAX_TEMPLATE} bytes")
        return ChatTemplate("file", path, text, repository_file=local)
    inline = llama.use("chat_template")
    if inline is not None and inline.value:
        if "{{" in inline.value or "{%" in inline.value:
            return ChatTemplate("inline", "the --chat-template text", inline.value)
        return ChatTemplate("builtin", f"llama.cpp's builtin template {inline.value!r}", None, unread=(
            f"--chat-template {inline.value} is one of llama.cpp's builtin templates, whose text is compiled into the "
            "engine: pass the template as a file of the repository (--chat-template-file) to have it judged"))
    model = llama.model
    if not model:
        return ChatTemplate("gguf", "the model's own template", None, unread=(
            "the model is not a file the command line names (a repository download): pass the template as a file of "
            "the repository (--chat-template-file) to have it judged"))
    path = host_path(model)
    if not os.path.isfile(path):
        return ChatTemplate("gguf", f"{path}'s own template", None, unread=(
            f"the template is {os.path.basename(path)}'s own (tokenizer.chat_template), and the model is not on this "
            "machine: pass the template as a file of the repository (--chat-template-file), or run the seams where "
            "the model is"))
    try:
        header = read_header(path)
    except InputError as exc:
        return ChatTemplate("gguf", f"{path}'s own template", None, unread=f"{exc.message}: the template cannot be read")
    text = header.fields.get(_GGUF_KEY)
    if not isinstance(text, str) or not text:
        return ChatTemplate("gguf", f"{path}'s own template", None, unread=(
            f"{os.path.basename(path)} carries no tokenizer.chat_template: pass the template with "
            "--chat-template-file"))
    return ChatTemplate("gguf", f"{path}'s own template", text)


def _probe_render(text: str) -> str:
    """The template rendered as build 11434's tool probe renders it: one user turn, one tool offered."""
    # Jinja2 (about 45 ms to import) only where a template is judged, through the one module that holds it.
    from fleetgate.sources.jinja import Jinja

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    def strftime_now(fmt: str) -> str:
        return "01 Jan 2026" if "%" in fmt else fmt

    # Lenient undefined values, as llama.cpp's engine leaves them: templates test `tools is defined` and the like.
    env = Jinja.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=Jinja.Undefined,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    tool: dict[str, Any] = {"type": "function", "function": {
        "name": PROBE_TOOL, "description": "Tool description",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
                       "required": ["arg"]}}}
    template = env.from_string(text)
    return template.render(messages=[{"role": "user", "content": "User message"}], tools=[tool],
                           add_generation_prompt=True, bos_token="", eos_token="")


def describes_tools(text: str) -> bool | str:
    """Whether the template uses the tool it is offered (True/False), or why jinja2 cannot say (a string)."""
    try:
        rendered = _probe_render(text)
    except Exception as exc:  # a template may raise anything: its raise_exception, a TypeError of a filter
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return PROBE_TOOL in rendered
