"""The engine accepts every flag the serve script passes (llama-server exits on an unknown one)."""

from __future__ import annotations

import shlex

from fleetgate.checks import check
from fleetgate.config import ServiceConfig
from fleetgate.engines.llamacpp import BUILD
from fleetgate.failure import Failure

NAME = "engine-accepts-argv"


def _is_llama(config: ServiceConfig) -> str | None:
    return None if config.llama is not None else f"{config.name} renders no llama-server command line"


@check(NAME, kind="seam", subject="service", cites=(), requires=_is_llama, engines=("llama.cpp",),
       summary="every flag is one llama-server accepts, with a value of the type it expects")
def engine_accepts_argv(config: ServiceConfig) -> None:
    llama = config.llama
    assert llama is not None
    if not llama.problems:
        _stray_positionals(config)
        return
    lines = []
    for problem in llama.problems:
        position = f"argv[{problem.index}] " if problem.index is not None else ""
        lines.append(f"{position}{problem.flag}: {problem.message}")
    first = llama.problems[0]
    use = llama.parsed.last(first.flag) if first.index is None else None
    # An unknown flag (or one without its value) is the flag's fault; a known flag with a value the
    # build's handler refuses (std::stoi, an enum, a range) is the value's.
    refused_value = all(p.message not in ("invalid argument", "expected a value") for p in llama.problems)
    raise Failure(
        code=f"{NAME}/refused-value" if refused_value else f"{NAME}/rejected-flag",
        service=config.name, check=NAME,
        where=config.where_variable(first.flag) if first.index is None and use is None else str(config.rendered.script),
        observed=f"{len(lines)} flag(s) llama-server (build {BUILD}) would reject at startup",
        details=lines,
        expected="only flags and values this build accepts (llama-server --help)",
        fix="correct the flag's spelling or value in the serve script or env file; llama-server stops at startup on either",
    )


def _stray_positionals(config: ServiceConfig) -> None:
    """llama-server takes no positional argument: its parser refuses any word that is not a flag or a flag's value
    (common/arg.cpp, common_params_parse_ex: "invalid argument"). The usual source is a variable that held a flag's
    value with the flag gone (``--jinja $JINJA`` with JINJA=true reads as ``--jinja true``)."""
    llama = config.llama
    assert llama is not None
    stray = list(llama.parsed.positionals)
    if not stray:
        return
    argv = config.rendered.argv
    index, word = stray[0]
    before = argv[index - 1] if index >= 1 else ""
    raise Failure(
        code=f"{NAME}/stray-positional",
        service=config.name, check=NAME,
        where=config.rendered.first_traced(shlex.join(argv[max(index - 1, 1):index + 1])) or str(config.rendered.script),
        observed=(f"argv[{index}] {word!r} (after {before!r}) is not a flag or a flag's value: llama-server "
                  f"(build {BUILD}) stops at startup with 'invalid argument: {word}'"),
        details=[f"argv[{i}] {w!r}" for i, w in stray],
        expected="only flags and their values: llama-server takes no positional argument",
        fix=(f"drop {word!r}, or give it the flag it belongs to: a switch takes no value, so a variable that "
             "expands to 'true' after one is a stray word"),
    )
