"""The engine accepts every flag the serve script passes, as the build the service runs reads them.

llama-server exits on an unknown flag, on a removed one and on a value its handler refuses. The build is
the service's ``engine_build`` (a build number, or an image tag that pins one); without one, or with an image
whose tag floats, the argv is read with the newest build held, and the figures of a pass and the expectation of
a failure say so with how to pin it. Every published build is recorded; a build never published is judged for a
flag only where the published builds on either side agree on it, else not judged ("not known"). A flag the build
does not know is explained from the tables of every published build (fleetgate/engines/llama_server_builds.json):
removed in build N (and what to use instead, where a replacement is known), added after the declared build (the
first build that has it), or never in any build (the nearest spelling).
"""

from __future__ import annotations

import shlex

from fleetgate.checks import NotJudged, service_seam
from fleetgate.engines.llama_builds import Builds, Resolved, load_builds
from fleetgate.engines.llamacpp import LlamaServerConfig, accepted_flags
from fleetgate.render.rendered import RenderedService

__all__ = ["engine_accepts_argv", "table_note"]


def _build_outside_tables(config: RenderedService) -> str | None:
    build = config.service.engine_build
    builds = load_builds()
    if build is not None and build.number is not None and builds.resolve(build.number) is None:
        return (f"{config.name} declares llama.cpp build {build.number} "
                f"({config.fleet.where('services', config.name, 'engine_build')}), outside the option tables "
                f"(builds {builds.first} to {builds.last}): its argv cannot be read as that build reads it; "
                "declare a build in that span, or extend the tables (python -m tools.extract_llama_args)")
    return None


def table_note(config: RenderedService) -> str:
    """Which build's table read the service's argv, how sure that is, and how to pin the build."""
    assert config.llama is not None
    declared = config.service.engine_build
    builds = load_builds()
    resolved = builds.resolve(config.llama.build)
    assert resolved is not None
    table = resolved.describe()
    pin = ("pin the build it runs: engine_build = { number = N }, or an image tag that names it "
           "(server-cuda-bNNNN)")
    if declared is not None and declared.number is None and declared.floating:
        return (f"{table}, the newest build held: {config.name} pulls {declared.image}, whose tag floats (the next "
                f"pull may run another build); {pin}")
    if declared is None or declared.number is None:
        return f"{table}, the newest build held: {config.name} pins no llama.cpp build; {pin}"
    origin = f"image {declared.image}" if declared.image else f"engine_build {declared.number}"
    fork = f", a {declared.fork} fork build read with mainline's table" if declared.fork not in ("mainline", "") else ""
    floating = "; the image tag floats, so the next pull may run another build" if declared.floating else ""
    return f"{table} ({origin}{fork}{floating})"


def _figures(config: RenderedService) -> dict[str, str]:
    return {"table": table_note(config)}


def _name(flag: str) -> str:
    """The name llama-server looks a written flag up by: ``--long_name`` is ``--long-name``."""
    return flag.replace("_", "-") if flag.startswith("--") else flag


def _undecided(llama: LlamaServerConfig, builds: Builds, resolved: Resolved) -> dict[str, str]:
    """Every flag (or variable) of the argv whose reading at the service's build the tables do not decide, with
    why: the build lies between two recorded ones whose tables differ for it."""
    found: dict[str, str] = {}
    uses = [(use.flag, use.index is None) for uses in llama.parsed.uses.values() for use in uses]
    uses += [(problem.flag, problem.index is None) for problem in llama.problems]
    for flag, env in uses:
        key = flag if env else _name(flag)
        reason = builds.undecided(key, resolved, env=env)
        if reason is not None:
            found[flag] = reason
    return found


def _not_judged(llama: LlamaServerConfig, resolved: Resolved, undecided: dict[str, str]) -> NotJudged:
    if undecided:
        flags = ", ".join(sorted({_name(f) for f in undecided}))
        return NotJudged(f"not judged: build {resolved.build} was never published; it lies between the published "
                         f"builds {resolved.sample} and {resolved.next_sample}, whose tables differ for {flags}, so "
                         f"what build {resolved.build} does with it is not known; declare the published build it "
                         f"was cut from ({resolved.sample} or {resolved.next_sample}) as engine_build")
    values = "; ".join(f"{p.flag}: {p.message}" for p in llama.unjudged)
    return NotJudged(f"not judged: {values}; record the handler's condition in extract_llama_args and regenerate "
                     "the tables (python -m tools.extract_llama_args)")


@service_seam(
    figures=_figures,
    cites=(),
    summary="every flag is one the service's llama-server build accepts, with a value of the type it expects",
    requires=_build_outside_tables,
    engines=("llama.cpp",),
    codes={
        "removed-flag": (
            "a flag the service's build no longer takes: the message names the build that dropped it (or refuses it as removed) and what "
            "to use instead"
        ),
        "newer-flag": "a flag added after the service's build: the message names the first build that has it",
        "refused-value": (
            "a value the service's llama-server build refuses at startup: not a number it reads, out of range, not one of its choices"
        ),
        "rejected-flag": (
            "a flag no llama-server build on record (9093 to 11434) has -- the message names the nearest spelling -- or one without its "
            "value"
        ),
        "empty-value": (
            "a flag whose value is the empty string (`-c ${CTX}` with CTX empty through `ExecStart=` or a Quadlet `Exec=`): "
            "llama-server reads '' as the value and refuses it, or runs without the setting"
        ),
        "flag-as-value": (
            "a flag whose value is another flag (`-c $CTX -ngl 999` with CTX empty: the unquoted variable vanished and "
            "-c took -ngl as its value, leaving 999 stray)"
        ),
        "stray-positional": (
            "a word that is neither a flag nor a flag's value (a variable that expanded to `true` after a switch): llama-server takes no "
            "positional and stops with `invalid argument`"
        ),
    },
)
def engine_accepts_argv(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    _swallowed_values(config)
    builds = load_builds()
    resolved = builds.resolve(llama.build)
    assert resolved is not None
    undecided = _undecided(llama, builds, resolved)
    decided = [p for p in llama.problems if p.flag not in undecided]
    if not decided:
        if undecided or llama.unjudged:
            raise _not_judged(llama, resolved, undecided)
        _stray_positionals(config)
        return
    lines = []
    kinds = []
    instead: list[str | None] = []
    problems = sorted(decided, key=lambda p: (p.index is not None, p.index or 0))
    for problem in problems:
        position = f"argv[{problem.index}] " if problem.index is not None else ""
        verdict = None
        if problem.message == "invalid argument" and "=" in problem.flag:
            kinds.append("never")
            flag = problem.flag.split("=", 1)[0]
            lines.append(f"{position}{problem.flag}: invalid argument: llama-server looks the whole word up, and no "
                         f"build has a flag of that name ({flag} takes its value as the next word)")
        elif problem.message == "invalid argument":
            verdict = builds.verdict(_name(problem.flag), resolved)
            kinds.append(verdict.kind)
            lines.append(f"{position}{problem.flag}: invalid argument: {verdict.message}")
        elif problem.message.startswith("the argument has been removed"):
            verdict = builds.verdict(problem.flag, resolved)
            kinds.append("removed")
            lines.append(f"{position}{problem.flag}: {verdict.message}")
        elif problem.message == "expected a value":
            kinds.append("never")
            lines.append(f"{position}{problem.flag}: {problem.message}")
        else:
            kinds.append("value")
            lines.append(f"{position}{problem.flag}: {problem.message}")
        instead.append(verdict.instead if verdict is not None else None)
    first = problems[0]
    use = llama.parsed.last(first.flag) if first.index is None else None
    # The first problem in argv order names the branch: a flag no build has (or one without its value), a
    # flag the build dropped, one added after it, or a known flag with a value the build's handler refuses.
    kind = kinds[0]
    if kind == "removed":
        fix = (f"{instead[0]} (what build {llama.build} takes instead), or pin a build that still takes {first.flag}"
               if instead[0] else
               f"no replacement for {first.flag} is on record: drop it, or pin a build that still takes it")
    elif kind == "newer":
        fix = "upgrade the build (engine_build) to the first one that has the flag, or drop the flag"
    else:
        fix = ("correct the flag's spelling or value in the serve script or env file; llama-server stops at startup on "
               "either")
    raise engine_accepts_argv.fail(config, "removed-flag" if kind == "removed" else "newer-flag" if kind == "newer"
                           else "refused-value" if kind == "value" else "rejected-flag",
                     where=config.where_variable(first.flag) if first.index is None and use is None else str(config.rendered.script),
                     observed=f"{len(lines)} flag(s) llama-server build {llama.build} would reject at startup",
                     details=lines,
                     expected=f"only flags and values this build accepts, read with {table_note(config)}",
                     fix=fix)


def _swallowed_values(config: RenderedService) -> None:
    """llama-server takes the word after a flag that takes a value as that value, whatever it is (common/arg.cpp):
    an empty word (systemd's ``${CTX}`` with CTX empty is one word, '') or the next flag (an unquoted empty ``$CTX``
    is no word at all). Either is the same mistake, an empty variable in a value position, and is named by the flag
    whose value went missing before the refusals it causes downstream."""
    llama = config.llama
    assert llama is not None
    accepted = accepted_flags(llama.build)
    uses = sorted((use for found in llama.parsed.uses.values() for use in found
                   if use.index is not None and use.value is not None and not use.flag.startswith("LLAMA_")),
                  key=lambda use: use.index or 0)
    for use in uses:
        assert use.value is not None and use.index is not None
        empty = use.value == ""
        if not empty and not (use.value.startswith("-") and use.value.split("=", 1)[0] in accepted):
            continue
        what = "the empty string" if empty else f"the next flag, {use.value}"
        argv = config.rendered.argv
        shown = shlex.join(argv[use.index:use.index + 3])
        raise engine_accepts_argv.fail(
            config, "empty-value" if empty else "flag-as-value",
            where=config.rendered.first_traced(shlex.join(argv[use.index:use.index + 2]))
            or (str(config.rendered.unit.path) if config.rendered.unit is not None else str(config.rendered.script)),
            observed=(f"argv[{use.index}] {use.flag} is given {what} ({shown} ...): the variable meant to hold its value "
                      "is empty, and llama-server takes the next word as the value whatever it is"),
            expected=f"{use.flag} followed by its value, or no {use.flag} at all",
            fix=(f"set the variable that feeds {use.flag}, or leave {use.flag} out when it is empty "
                 f"(${{VAR:+{use.flag} \"$VAR\"}} in a script; in ExecStart= give the variable a default with Environment=)"),
        )


def _stray_positionals(config: RenderedService) -> None:
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
    raise engine_accepts_argv.fail(
        config, "stray-positional",
        where=config.rendered.first_traced(shlex.join(argv[max(index - 1, 1):index + 1])) or str(config.rendered.script),
        observed=(f"argv[{index}] {word!r} (after {before!r}) is not a flag or a flag's value: llama-server "
                  f"(build {llama.build}) stops at startup with 'invalid argument: {word}'"),
        details=[f"argv[{i}] {w!r}" for i, w in stray],
        expected="only flags and their values: llama-server takes no positional argument",
        fix=(f"drop {word!r}, or give it the flag it belongs to: a switch takes no value, so a variable that "
             "expands to 'true' after one is a stray word"),
    )
