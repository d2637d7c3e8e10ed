"""The catalogue holds all 91 incidents, every entry is complete, and every cited id resolves in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetgate.checks import REGISTRY, load_all
from fleetgate.errors import InputError
from fleetgate.ids import ID_PATTERN, definitions, find_ids, undefined
from fleetgate.incidents import KINDS, load_catalogue
from fleetgate.manifest import load_fleet

REPO = Path(__file__).resolve().parents[1]
ENTRIES = load_catalogue(REPO / "fixtures" / "incidents")
INCIDENTS = [e for e in ENTRIES if e.is_incident]


def test_one_entry_per_incident() -> None:
    assert [e.id for e in INCIDENTS] == [f"INC-{n:02d}" for n in range(1, 92)]


def test_every_incident_tells_its_story() -> None:
    for entry in INCIDENTS:
        for field in ("name", "date", "service", "symptom", "cause", "fix"):
            assert getattr(entry, field).strip(), f"{entry.id}: no {field}"
        assert entry.reproduction.kind in KINDS
        if entry.reproduction.kind in ("mutation", "server", "host"):
            assert entry.codes, f"{entry.id}: caught, but by no failure code"


def _cited_by_checks() -> set[str]:
    load_all()
    cited = {c for check in REGISTRY.values() for c in check.cites}
    # Failures cite ids of their own (cites=...), and messages name incidents: read every check module.
    for module in (REPO / "fleetgate" / "checks").glob("*.py"):
        cited |= set(ID_PATTERN.findall(module.read_text(encoding="utf-8")))
    fleet = load_fleet(REPO / "fixtures" / "fleet" / "fleet.toml")
    cited |= {c for chain in fleet.timeouts for c in chain.cites}
    return cited


def _cited_by_entries() -> set[str]:
    cited: set[str] = set()
    for entry in ENTRIES:
        cited |= set(entry.cites)
        cited |= set(find_ids(entry.path.read_text(encoding="utf-8")))
    return cited


def test_every_id_a_check_or_failure_cites_is_defined() -> None:
    cited = _cited_by_checks()
    assert len(cited) > 50
    assert undefined(cited, [e.id for e in ENTRIES]) == []


def test_every_id_an_entry_cites_is_defined() -> None:
    assert undefined(_cited_by_entries(), [e.id for e in ENTRIES]) == []


def test_an_undefined_id_is_found() -> None:
    """The negative control: an id nobody defined is reported, a defined one is not."""
    assert undefined(["B-VL-3", "C-L-1", "FG-ARGV-1", "INC-07", "B-VL-99", "INC-92"], ["INC-07"]) == ["B-VL-99", "INC-92"]


def test_definitions_carry_their_rule_text() -> None:
    known = definitions()
    assert {k.split("-")[0] for k in known} == {"B", "C", "FG"}
    assert sum(k.startswith("B-") for k in known) == 136
    assert sum(k.startswith("C-") for k in known) == 66
    assert known["B-VL-3"].rule.startswith("CHUNK is coupled to MAXLEN")
    assert dict(known["C-L-7"].fields)["expected"].startswith("**`NRestarts=0`**")


def test_server_reproductions_name_a_live_test_that_exists() -> None:
    load_all()
    for entry in INCIDENTS:
        r = entry.reproduction
        if r.kind != "server":
            continue
        assert r.check in REGISTRY and REGISTRY[r.check].kind == "live", f"{entry.id}: {r.check} is not a live check"
        assert r.test is not None
        path, _, rest = r.test.partition("::")
        assert (REPO / path).is_file(), f"{entry.id}: {path} does not exist"
        match = re.search(r"\[([^]]+)\]", rest)
        assert match, f"{entry.id}: name the case, as in {path}::test_x[case]"
        text = (REPO / path).read_text(encoding="utf-8")
        case = re.search(rf'^    "{re.escape(match.group(1))}": .*?(?=^    "[a-z-]+": |^}}$)', text, flags=re.M | re.S)
        assert case, f"{entry.id}: no case {match.group(1)} in {path}"
        # The case expects the entry's live codes (tests/live assert them as the check's exact outcome).
        live = [c for c in entry.codes if c.startswith("live-")]
        assert live and all(f'"{c}"' in case.group(0) for c in live), f"{entry.id}: {live} not expected by {r.test}"


def test_host_reproductions_name_a_host_test_that_asserts_their_codes() -> None:
    """A host entry names the test in tests/host that reproduces it, and that test asserts each of the entry's
    failure codes as an exact outcome (tests/test_catalogue.py runs it). An entry without one says what it is
    pending on."""
    import ast

    load_all()
    named = 0
    for entry in INCIDENTS:
        r = entry.reproduction
        if r.kind != "host":
            continue
        assert r.check in REGISTRY and REGISTRY[r.check].kind == "host", f"{entry.id}: {r.check} is not a host check"
        assert all(code.split("/", 1)[0] == r.check for code in entry.codes), f"{entry.id}: {entry.codes} not {r.check}'s"
        if r.test is None:
            assert r.pending, f"{entry.id}: a host entry names its test, or what it is pending on"
            continue
        named += 1
        path, _, name = r.test.partition("::")
        assert path.startswith("tests/host/") and (REPO / path).is_file(), f"{entry.id}: {path} is not a test in tests/host"
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        found = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name]
        assert found, f"{entry.id}: no test {name} in {path}"
        literals = {n.value for n in ast.walk(found[0]) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert set(entry.codes) <= literals, f"{entry.id}: {r.test} does not assert {sorted(set(entry.codes) - literals)}"
    assert named == 3  # INC-10, INC-34, INC-75


def test_every_code_the_catalogue_names_is_declared_by_its_check() -> None:
    """A mutation's expected codes are seam codes, a server or host entry's codes its check's: each one declared
    by that check (fleetgate.checks, ``codes=``), so an entry cannot expect a branch no check can raise."""
    load_all()
    for entry in [*ENTRIES, *load_catalogue(REPO / "fixtures" / "branches")]:
        for e in entry.expect:
            assert e.check in REGISTRY and REGISTRY[e.check].kind == "seam", f"{entry.id}: {e.code}"
            assert e.code in REGISTRY[e.check].codes, f"{entry.id}: {e.check} declares no {e.code}"
        for code in entry.codes:
            check = REGISTRY.get(code.split("/", 1)[0])
            assert check is not None and code in check.codes, f"{entry.id}: no check declares {code}"


@pytest.mark.parametrize(("text", "message"), [
    ('id = "INC-99"\nname = "x"\n', "'date': expected a non-empty string"),
    ('id = "INC-99"\nname = "x"\ndate = "d"\nservice = "s"\nsymptom = "s"\ncause = "c"\nfix = "f"\n', "needs [[mutation]] and expect"),
    ('id = "INC-99"\nname = "x"\ndate = "d"\nservice = "s"\nsymptom = "s"\ncause = "c"\nfix = "f"\n[reproduction]\nkind = "none"\n',
     "gives the reason"),
    ('id = "INC-99"\nname = "x"\ndate = "d"\nservice = "s"\nsymptom = "s"\ncause = "c"\nfix = "f"\n[reproduction]\nkind = "maybe"\n',
     "kind: expected one of"),
    ('id = "INC-99"\nname = [\n', "not valid TOML"),
    ('id = "INC-99"\nname = "x"\ndate = "d"\nservice = "s"\nsymptom = "s"\ncause = "c"\nfix = "f"\n'
     'expect = ["svc: card-floor/short", "svc: card-floor/unknown-device"]\n[[mutation]]\nfile = "f"\ncreate = ""\n',
     "a check fails a subject with one code"),
])
def test_a_malformed_entry_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "INC-99.toml").write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_catalogue(tmp_path, incidents=True)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(str(tmp_path / "INC-99.toml"))
