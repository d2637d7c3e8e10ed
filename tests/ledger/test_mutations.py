"""Every memory seam shown failing on a mutation of the example fleet, and only where it should.

Each mutation copies fixtures/fleet, edits it, renders every service and runs every registered service
seam on the copy. The set of (service, check) failures must equal the mutation's expectation exactly,
and each failure must speak to the operator: service, check, file:line, observed, expected, fix.
Controls (no expected failure) show the seams are not failing on everything nearby.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetgate.checks import REGISTRY, NotApplicable, get_check
from fleetgate.failure import Failure
from fleetgate.manifest import load_fleet
from fleetgate.render.rendered import attempt_service
from fleetgate.runner import waiver_day

FLEET = Path(__file__).resolve().parents[2] / "fixtures" / "fleet"
ENV = "scripts/frank-medium.env"
MEDIUM = "frank-medium"


@dataclass(frozen=True)
class Edit:
    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutation:
    id: str
    why: str
    edits: tuple[Edit, ...]
    fails: frozenset[tuple[str, str]]
    says: tuple[str, ...] = ()
    """Text the failures must contain (the numbers an operator acts on)."""
    line: bool = True
    """The failure's ``where`` resolves to file:line."""


def _fails(*checks: str, service: str = MEDIUM) -> frozenset[tuple[str, str]]:
    return frozenset((service, c) for c in checks)


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("ts-36-29", "one step toward ROCm0 moves DeltaNet block 36 (seeds: card 0 free 0.45, gap 2.22)",
             (Edit(ENV, "TENSOR_SPLIT=35,30", "TENSOR_SPLIT=36,29"),),
             _fails("card-floor", "card-balance"),
             ("ROCm0 keeps 0.61 GiB free", "ROCm0 holds 2.79 GiB more than ROCm1", "-ts 35,30")),
    Mutation("ts-34-31-control", "part 2's split: ROCm1 keeps 1.07 GiB (E.9 measured 1.08)",
             (Edit(ENV, "TENSOR_SPLIT=35,30", "TENSOR_SPLIT=34,31"),), frozenset()),
    Mutation("cache-ram-8192", "the cap before 2026-09-18 refused every long conversation (INC-11)",
             (Edit(ENV, "CACHE_RAM=16384", "CACHE_RAM=8192"),), _fails("prompt-cache-holds-slot"),
             ("one full slot's state is 12.90 GiB", "at least 13211 MiB")),
    Mutation("cache-ram-unbounded", "-1 on a shared host (B-PC-3)",
             (Edit(ENV, "CACHE_RAM=16384", "CACHE_RAM=-1"),), _fails("prompt-cache-holds-slot"),
             ("grow without bound",)),
    Mutation("cache-ram-over-half", "40 GiB of a 62 GiB host (B-PC-2)",
             (Edit(ENV, "CACHE_RAM=16384", "CACHE_RAM=40960"),), _fails("prompt-cache-holds-slot"),
             ("half the host RAM: 31.00 GiB",)),
    Mutation("dflash2-control", "DFlash2 and its 2048 window instead of MTP: the window bounds its KV, but "
             "ROCm1 sheds 2.6 GiB and the split wants rebalancing",
             (Edit(ENV, "SPEC_TYPE=draft-mtp", "SPEC_TYPE=draft-dflash"),), _fails("card-balance")),
    Mutation("drafter-without-window", "the same drafter without sliding_window caches the whole "
             "393216-token context (INC-03)",
             (Edit(ENV, "SPEC_TYPE=draft-mtp", "SPEC_TYPE=draft-dflash"),
              Edit("profiles/qwen3.8-27b-dflash2.toml", "sliding_window = 2048\n", "")),
             _fails("card-floor", "card-balance", "drafter-kv-fits"),
             ("declares no sliding_window", "7.50 GiB of KV")),
    Mutation("context-raise", "two slots of the trained 262144 instead of 196608",
             (Edit(ENV, "CTX_SIZE=393216", "CTX_SIZE=524288"),
              Edit("fleet.toml", "context_window = 196608", "context_window = 262144")),
             # ... and the docs still give frank-medium 2 x 196,608 (docs-shapes, B-DOC-4).
             _fails("card-floor", "card-balance", "drafter-kv-fits", "prompt-cache-holds-slot", "docs-shapes"),
             ("ROCm0 keeps -3.48 GiB free", "2 x 262,144, as the env files render it")),
    Mutation("zealot-f16-kv", "an f16 K+V pair on the 3090 (B-FIT-17: q8_0 is the only KV that fits)",
             (Edit("scripts/frank-zealot.env", "CACHE_TYPE_K=q8_0\nCACHE_TYPE_V=q8_0",
                   "CACHE_TYPE_K=f16\nCACHE_TYPE_V=f16"),),
             _fails("card-floor", "prompt-cache-holds-slot", service="frank-zealot"),
             ("the floor of host rtx3090", "CUDA0 keeps -4.71 GiB free"),
             # frank-zealot's serve script sources its env file; this branch's renderer does not resolve
             # the lines of variables set there (an xtrace prefix fixed on main), so where is the script
             line=False),
)


def _copy(tmp_path: Path, edits: tuple[Edit, ...]) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(FLEET, root)
    for edit in edits:
        path = root / edit.file
        text = path.read_text(encoding="utf-8")
        assert text.count(edit.old) == 1, f"{edit.file}: expected exactly one {edit.old!r}"
        path.write_text(text.replace(edit.old, edit.new), encoding="utf-8")
    return root / "fleet.toml"


def run_service_seams(fleet_path: Path) -> dict[tuple[str, str], Failure]:
    """Every registered service seam on every service of a fleet: the failures by (service, check), less those a
    waiver of the fleet covers on the runner's day (the example fleet waives its open listeners)."""
    get_check("card-floor")  # imports every check module
    fleet = load_fleet(fleet_path)
    today = waiver_day()
    failures: dict[tuple[str, str], Failure] = {}
    for service in fleet.services.values():
        attempt = attempt_service(fleet, service)
        for name, check in REGISTRY.items():
            if check.kind != "seam" or check.subject != "service":
                continue
            subject = attempt if name == "serve-script-renders" else attempt.config
            if subject is None or (subject is attempt.config and check.why_not(subject) is not None):
                continue
            try:
                check(subject)
            except NotApplicable:  # not judged (a template on no machine here) or not applying: no failure either way
                continue
            except Failure as failure:
                if not any(w.covers(service.name, failure.code) and not w.expired(today) for w in fleet.waivers):
                    failures[(service.name, name)] = failure
    return failures


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.id for m in MUTATIONS])
def test_mutation_fails_exactly_its_checks(mutation: Mutation, tmp_path: Path) -> None:
    failures = run_service_seams(_copy(tmp_path, mutation.edits))
    assert set(failures) == mutation.fails, "\n\n".join(str(f) for f in failures.values())
    text = "\n".join(str(f) for f in failures.values())
    for phrase in mutation.says:
        assert phrase in text, f"{phrase!r} not in:\n{text}"
    for (service, name), failure in failures.items():
        lines = str(failure).splitlines()
        assert lines[0].startswith(f"{service}: {name}")
        if mutation.line:
            assert re.search(r"where:\s+\S+:\d+", str(failure)), f"no file:line in:\n{failure}"
        assert Path(failure.where.split(" ")[0].rsplit(":", 1)[0]).is_file(), failure.where
        for field in ("observed", "expected", "fix"):
            assert getattr(failure, field).strip(), f"{name}: empty {field}"


def test_example_fleet_passes_every_memory_seam() -> None:
    failures = run_service_seams(FLEET / "fleet.toml")
    memory = {k: v for k, v in failures.items() if k[1] in {"card-floor", "card-balance", "drafter-kv-fits",
                                                             "prompt-cache-holds-slot"}}
    assert not memory, "\n\n".join(str(f) for f in memory.values())
    applied = {name for name in ("card-floor", "card-balance", "drafter-kv-fits", "prompt-cache-holds-slot")}
    assert applied <= set(REGISTRY)


def test_seams_fail_through_pytest_on_the_split_mutation(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The same mutation through `pytest seams/ --fleet COPY`: the plugin reports the two failures."""
    fleet = _copy(tmp_path, MUTATIONS[0].edits)
    repo = Path(__file__).resolve().parents[2]
    # fleetgate supplies seams/test_memory.py (not on disk): its directory, and the module by name
    result = pytester.runpytest_subprocess(str(repo / "seams"), "-k", "test_memory.py", "--fleet", str(fleet), "-p",
                                           "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=2, skipped=5)
    result.stdout.fnmatch_lines([
        "*frank-medium: card-floor*",
        "*where:*frank-medium.env:34 (TENSOR_SPLIT)*",
        "*observed: ROCm0 keeps 0.61 GiB free*",
        "*frank-medium: card-balance*",
    ])
