"""A llama-server whose contract promises tool calls renders its chat template with jinja, and its template describes
the tools (issue 32).

llama-server refuses a request that carries ``tools`` (or ``tool_choice``) when jinja is off: "tools param requires
--jinja flag" (tools/server/server-common.cpp, ``oaicompat_chat_params_parse``). Jinja is on by default at build
11434; ``--no-jinja`` (``LLAMA_ARG_JINJA=0``, a preset's ``no-jinja = true``) turns it off, and every tool call of
the contract is refused.

``chat-template`` reads the template the engine will use (``fleetgate.chat_template``: the ``--chat-template-file``
of the repository, the ``--chat-template`` text, or the model's GGUF header when the model is on this machine): a
template file the deployed repository does not hold stops llama-server at start; a template that never uses the
tools it is offered leaves llama-server to describe them its own way, which the model was not trained on. A template
that cannot be read here (a builtin name, a model on another machine) is "not judged", naming what to declare. A
container's template file is container-paths' to judge (it maps the mounts).
"""

from __future__ import annotations

from pathlib import Path

from fleetgate.chat_template import PROBE_TOOL, describes_tools
from fleetgate.checks import NotApplicable, NotJudged, service_seam
from fleetgate.checks._common import llama_of
from fleetgate.render.rendered import RenderedService
from fleetgate.render.start import Compose, Kubernetes, container_run

__all__ = ["TOOLS"]

TOOLS = "tools-need-jinja"


def _promised(config: RenderedService) -> str | None:
    if config.service.contract.tools is not True:
        return f"{config.name}'s contract promises no tool calls (services.{config.name}.contract.tools)"
    return None


@service_seam(
    cites=(),
    summary="a llama-server whose contract promises tool calls keeps jinja on (llama-server refuses tools without it)",
    requires=_promised,
    engines=("llama.cpp",),
    codes={
        "no-jinja": ("the contract promises tool calls and the server runs with `--no-jinja`: llama-server refuses every "
                     "request with tools ('tools param requires --jinja flag')"),
    },
)
def tools_need_jinja(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    if llama.jinja:
        return
    raise tools_need_jinja.fail(
        config, "no-jinja",
        where=config.where_flag(llama.use("jinja")),
        observed=("jinja is off (--no-jinja): llama-server answers every request with tools 'tools param requires "
                  "--jinja flag'"),
        expected=f"jinja on for a server whose contract promises tool calls ({config.fleet.where('services', config.name, 'contract')})",
        fix="drop --no-jinja (jinja is on by default), or promise no tool calls in the contract",
    )


def _in_repository(config: RenderedService, path: Path) -> str:
    try:
        return str(path.relative_to(config.fleet.root))
    except ValueError:
        return str(path)


def _template_matters(config: RenderedService) -> str | None:
    given = llama_of(config).use("chat_template_file")
    if config.service.contract.tools is not True and (given is None or not given.value):
        return (f"{config.name} passes no --chat-template-file and its contract promises no tool calls "
                f"(services.{config.name}.contract.tools)")
    return None


@service_seam(
    cites=(),
    summary=("the chat template a llama-server uses is there, and describes the tools its contract promises "
             "(read from the repository's template file, or the model's GGUF header on this machine)"),
    requires=_template_matters,
    engines=("llama.cpp",),
    codes={
        "missing-file": ("--chat-template-file names a file of the deployed repository that the repository does not "
                         "hold: llama-server stops at start ('failed to open file')"),
        "no-tools": ("the contract promises tool calls and the chat template never uses the tools it is offered "
                     "(build 11434's supports_tools capability): llama-server describes them its own way, 'may produce "
                     "bad results'"),
    },
)
def chat_template(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    start = config.rendered.start
    if ((isinstance(start, Compose | Kubernetes) and start.read is not None)
            or container_run(start) is not None):
        given = llama.use("chat_template_file")
        if given is not None and given.value:
            raise NotApplicable(f"{config.name} runs in a container: its --chat-template-file is a path of the "
                                "container, which container-paths holds to the mounts")
    template = config.chat_template
    assert template is not None
    if template.missing:
        given = llama.use("chat_template_file")
        raise chat_template.fail(
            config, "missing-file",
            where=config.where_flag(given),
            observed=(f"--chat-template-file {template.what}, which is {template.repository_file} of this repository: "
                      "no such file; llama-server stops at start ('failed to open file')"),
            expected="a template file the repository holds, deployed with it",
            fix="commit the template under that path, or point --chat-template-file at the file the repository has",
        )
    if config.service.contract.tools is not True:
        return
    if not llama.jinja:
        raise NotApplicable(f"{config.name} runs with --no-jinja: no template renders tools ({TOOLS} judges it)")
    if template.text is None:
        raise NotJudged(f"the chat template of {config.name} cannot be read: {template.unread}")
    verdict = describes_tools(template.text)
    if isinstance(verdict, str):
        raise NotJudged(f"the chat template of {config.name} ({template.what}) does not render under jinja2 "
                        f"({verdict}): whether it describes tools cannot be said here; the live gate reads the "
                        "server's own verdict from /props (chat_template_caps)")
    if verdict:
        return
    raise chat_template.fail(
        config, "no-tools",
        where=(_in_repository(config, template.repository_file) if template.repository_file is not None
               else config.where_flag(llama.use("chat_template")) if template.origin == "inline" else template.what),
        observed=(f"{template.what} never uses the tools it is offered (rendered with one tool, {PROBE_TOOL!r}, its "
                  "output does not name it): llama-server describes the tools its own way ('Template supports tool "
                  "calls but does not natively describe tools. The fallback behaviour used may produce bad results')"),
        expected=(f"a template that renders the tools, for a contract that promises tool calls "
                  f"({config.fleet.where('services', config.name, 'contract')})"),
        fix=("use the model's tool-calling template (--chat-template-file with the template the model was tuned on), "
             "or promise no tool calls in the contract"),
    )
