"""A llama-server whose contract promises tool calls renders its chat template with jinja (issue 32).

llama-server refuses a request that carries ``tools`` (or ``tool_choice``) when jinja is off: "tools param requires
--jinja flag" (tools/server/server-common.cpp, ``oaicompat_chat_params_parse``). Jinja is on by default at build
11434; ``--no-jinja`` (``LLAMA_ARG_JINJA=0``, a preset's ``no-jinja = true``) turns it off, and every tool call of
the contract is refused. Whether the template itself renders the tools is the template's, which the files do not
hold (the GGUF's own template is not in its profile): the live gate reads it from ``/props``.
"""

from __future__ import annotations

from fleetgate.checks import service_seam
from fleetgate.rendered import RenderedService

__all__ = ["TOOLS"]

TOOLS = "tools-need-jinja"


def _promised(config: RenderedService) -> str | None:
    if config.llama is None:
        return f"{config.name} renders no llama-server command line"
    if config.service.contract.tools is not True:
        return f"{config.name}'s contract promises no tool calls (services.{config.name}.contract.tools)"
    return None


CHECK = service_seam(
    TOOLS,
    cites=(),
    summary="a llama-server whose contract promises tool calls keeps jinja on (llama-server refuses tools without it)",
    requires=_promised,
    engines=("llama.cpp",),
    codes={
        "no-jinja": ("the contract promises tool calls and the server runs with `--no-jinja`: llama-server refuses every "
                     "request with tools ('tools param requires --jinja flag')"),
    },
)


@CHECK.register
def tools_need_jinja(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    if llama.jinja:
        return
    raise CHECK.fail(
        config, "no-jinja",
        where=config.where_flag(llama.use("jinja")),
        observed=("jinja is off (--no-jinja): llama-server answers every request with tools 'tools param requires "
                  "--jinja flag'"),
        expected=f"jinja on for a server whose contract promises tool calls ({config.fleet.where('services', config.name, 'contract')})",
        fix="drop --no-jinja (jinja is on by default), or promise no tool calls in the contract",
    )
