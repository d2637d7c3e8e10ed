"""An explicitly empty variable must reach the script as empty and omit its flag (B-SH-1, INC-57).

bash's ``${VAR:=default}`` replaces an empty value; ``${VAR=default}`` only an unset one. The check
does not read the script: it asks for it rendered twice (its probe), as bash runs it, and compares.
"""

from __future__ import annotations

from fleetgate.checks import NotApplicable, service_seam
from fleetgate.render.rendered import Probe, RenderedService
from fleetgate.render.types import RenderRefused

__all__: list[str] = []


def _no_omittable(config: RenderedService) -> str | None:
    if not config.service.omittable:
        return (f"{config.name} declares no omittable variable: list in services.{config.name}.omittable "
                "each variable whose empty value must omit its flag")
    return None


def _flag_fed_by(argv: tuple[str, ...], sentinel: str) -> str | None:
    for i, arg in enumerate(argv):
        if sentinel in arg:
            if arg.startswith("--") and "=" in arg:
                return arg.split("=", 1)[0]
            if i > 0 and argv[i - 1].startswith("-"):
                return argv[i - 1]
    return None


def _sentinel(variable: str) -> str:
    return f"fleetgate-probe-{variable.lower()}"


def _set_and_emptied(config: RenderedService) -> list[Probe]:
    """The renders ``empty-means-omit`` asks: each omittable variable set to a marker, and set empty."""
    return [Probe({variable: value}) for variable in config.service.omittable for value in (_sentinel(variable), "")]


@service_seam(
    probes=_set_and_emptied,
    cites=("B-SH-1", "INC-57"),
    summary="setting an omittable variable to the empty string omits the flag it feeds",
    requires=_no_omittable,
    codes={
        "feeds-no-flag": "an omittable variable sets no flag",
        "refuses-empty": "the script stops when an omittable variable is empty",
        "empty-keeps-flag": "an empty omittable variable still passes its flag (INC-57)",
    },
)
def empty_means_omit(config: RenderedService) -> None:
    for variable in config.service.omittable:
        sentinel = _sentinel(variable)
        try:
            probe = config.probe({variable: sentinel})
        except RenderRefused as refused:
            raise NotApplicable(f"the serve script refuses {variable}={sentinel} ({refused.message}), so which flag "
                                f"it feeds cannot be seen: is {variable} a flag's value? If not, drop it from "
                                f"services.{config.name}.omittable") from None
        flag = _flag_fed_by(probe.argv, sentinel)
        if flag is None:
            raise empty_means_omit.fail(
                config, "feeds-no-flag",
                where=config.fleet.where("services", config.name, "omittable"),
                observed=f"{variable} feeds no flag of the rendered argv",
                expected=f"{variable} (declared omittable) to set a flag's value",
                fix=f"remove {variable} from omittable, or make the serve script pass it",
            )
        try:
            empty = config.probe({variable: ""})
        except RenderRefused as refused:
            raise empty_means_omit.fail(
                config, "refuses-empty",
                where=f"{refused.path}:{refused.line or ''}".rstrip(":"),
                observed=f"with {variable}= (empty) the serve script refuses: {refused.message}",
                expected=f"an empty {variable} omits {flag}",
                fix=f"treat an empty {variable} as 'omit {flag}' in the serve script",
            ) from None
        if flag in empty.argv:
            value = empty.argv[empty.argv.index(flag) + 1] if empty.argv.index(flag) + 1 < len(empty.argv) else ""
            raise empty_means_omit.fail(
                config, "empty-keeps-flag",
                where=str(config.rendered.script),
                observed=f"with {variable}= (empty) the engine still gets {flag} {value}",
                expected=f"an explicitly empty {variable} omits {flag} (that arm is unreachable otherwise)",
                fix=(f"use ${{{variable}=default}}, not ${{{variable}:=default}} or ${{{variable}:-default}}: "
                     "the colon forms replace an empty value with the default"),
            )
