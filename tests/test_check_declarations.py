"""The decorator is the declaration: a check is named after its function, and says its policy and engines itself.

Node ids (``seams/test_MODULE.py::test_NAME[service]``), waivers, JUnit and the docs name checks, so the move from
``CHECK = service_seam(NAME, ...)`` to ``@service_seam(...) def name`` kept every name: tests/data/check-declarations.json
is the registry as the tree held it before the move (names, kinds, subjects, modules, engines, codes and the policies
that governed them, then kept as lists in fleetgate/policies.py), and the registry of today must be that.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from fleetgate.checks import REGISTRY, load_all, service_seam

REPO = Path(__file__).resolve().parents[1]
BEFORE = json.loads((REPO / "tests" / "data" / "check-declarations.json").read_text(encoding="utf-8"))


def _today() -> dict[str, dict[str, object]]:
    load_all()
    return {name: {"kind": check.kind, "subject": check.subject, "module": check.func.__module__.rsplit(".", 1)[1],
                   "engines": list(check.engines) if check.engines else None, "policy": check.policy,
                   "policy_codes": dict(check.policy_codes), "codes": sorted(check.codes)}
            for name, check in sorted(REGISTRY.items()) if check.func is not None and check.func.__module__.startswith(
                "fleetgate.checks.")}


ADDED_SINCE: dict[str, list[str]] = {
    # issue 32: a docker/podman run line or a Quadlet that grants its container no GPU (fleetgate.visibility's
    # container_grant), beside the compose and Kubernetes branches of the same check
    "device-visibility": ["device-visibility/container-no-gpu"],
    # issue 32: a Kubernetes container's paths through its volumeMounts (hostPath as compose's bind mounts, a
    # ConfigMap of the repository by its keys), beside the Quadlet and compose branches
    "container-paths": ["container-paths/k8s-configmap-key-missing", "container-paths/k8s-missing-in-repo",
                        "container-paths/k8s-not-mounted", "container-paths/k8s-payload-undeclared"],
    # a stream's first token late twice while the engine sat idle (fleetgate.live.activity), apart from a declared
    # bound's too-slow
    "live-stream": ["live-stream/held"],
}
"""Codes declared after the move, by check: the registry of today is the one before plus these."""


def test_every_check_keeps_its_name_codes_engines_and_policy() -> None:
    today = _today()
    assert sorted(today) == sorted(BEFORE)
    expected = {name: {**entry, "codes": sorted([*entry["codes"], *ADDED_SINCE.get(name, [])])}
                for name, entry in BEFORE.items()}
    assert today == expected


def test_a_check_is_named_after_its_function_unless_it_says_otherwise() -> None:
    # the one check whose established name is not its function's: seam_quadlet's container-paths
    load_all()
    renamed = {name: check.func.__name__ for name, check in REGISTRY.items()
               if check.func is not None and check.func.__module__.startswith("fleetgate.checks.")
               and check.func.__name__.replace("_", "-") != name}
    assert renamed == {"container-paths": "quadlet_container_paths"}


def test_no_check_module_keeps_a_declaration_apart_from_its_function() -> None:
    # the old form, CHECK = service_seam(NAME, ...) then @CHECK.register, must not come back beside the new one
    factories = {"service_seam", "attempt_seam", "chain_seam", "fleet_seam", "live_check", "host_check"}
    apart = []
    for path in sorted((REPO / "fleetgate" / "checks").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in factories):
                apart.append(f"{path.name}:{node.lineno}")
    assert apart == []


def test_a_declaration_refuses_a_policy_nobody_defined_and_a_policy_code_it_does_not_declare() -> None:
    with pytest.raises(ValueError, match=r"check 'example-policy': no policy named 'no-such-policy'"):
        service_seam(cites=(), summary="s", codes={"b": "what"}, policy="no-such-policy").declare("example_policy")
    with pytest.raises(ValueError, match=r"policy_codes names branches it does not declare: \['other'\]"):
        service_seam(cites=(), summary="s", codes={"b": "what"},
                     policy_codes={"other": "slot-padding"}).declare("example_policy")
    check = service_seam(cites=(), summary="s", codes={"b": "what"}, policy_codes={"b": "slot-padding"},
                         name="example-named").declare("example_function")
    assert (check.name, dict(check.policy_codes)) == ("example-named", {"example-named/b": "slot-padding"})


def test_a_branch_that_consults_a_policy_is_declared_under_it() -> None:
    # policy_on(fleet, NAME) in a check module is a branch that fires only under that policy: its declaration says so
    # (policy_codes), so that the docs, the schema test and the skips read it from one place
    load_all()
    consulted: dict[str, set[str]] = {}
    for path in sorted((REPO / "fleetgate" / "checks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "policy_on"
                    and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)):
                consulted.setdefault(path.stem, set()).add(node.args[1].value)
    declared: dict[str, set[str]] = {}
    for check in REGISTRY.values():
        if check.func is not None and check.policy_codes:
            declared.setdefault(check.func.__module__.rsplit(".", 1)[1], set()).update(check.policy_codes.values())
    assert consulted == declared
