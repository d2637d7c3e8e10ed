"""The routing proxy's seams read its env file as its consumer reads it and hold the capacity law at its bound.

The catalogue shows each branch failing on the example fleet (INC-37..40); here the readings around them: the
proxy's defaults, podman's literal quotes, the window on both sides, admission that does or does not bind, a third
card, the pool's exact bound, and bad values as one line naming file and line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetgate.checks import NotApplicable, get_check
from fleetgate.errors import InputError
from fleetgate.failure import Failure
from fleetgate.manifest import load_fleet
from tests.fleet_edits import Edit, edited_fleet

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
CONFIG = "dankserver/frank-medium-proxy/frank-medium-proxy.env"
LOAD = 'conversations = { count = 3, tokens = 30000, why = "three agent loops of ~30k tokens: two per card is the comfortable ceiling" }'



def _code(check: str, fleet_toml: Path) -> str:
    """The failure code the check raises on the fleet, or 'passed'."""
    try:
        get_check(check)(load_fleet(fleet_toml))
    except Failure as failure:
        return failure.code
    return "passed"


def _load(count: int, tokens: int) -> Edit:
    return ("fleet.toml", LOAD, f"conversations = {{ count = {count}, tokens = {tokens} }}")


def test_the_example_fleet_holds() -> None:
    assert _code("proxy-routing", FLEET / "fleet.toml") == "passed"
    assert _code("proxy-capacity", FLEET / "fleet.toml") == "passed"


@pytest.mark.parametrize(("edits", "code"), [
    # Unset, the proxy runs its defaults: adaptive, 4 KiB.
    ([(CONFIG, "ROUTING=adaptive\n", ""), (CONFIG, "AFFINITY_BYTES=4096\n", "")], "passed"),
    ([(CONFIG, "ROUTING=adaptive", "ROUTING=roundrobin")], "proxy-routing/not-adaptive"),
    ([(CONFIG, "ROUTING=adaptive", "ROUTING=least-loaded")], "proxy-routing/not-adaptive"),
    # podman's --env-file keeps quotes: the proxy would read '"adaptive"', which is no policy of it.
    ([(CONFIG, "ROUTING=adaptive", 'ROUTING="adaptive"')], "proxy-routing/not-adaptive"),
    # ... while systemd's EnvironmentFile= strips them.
    ([(CONFIG, "ROUTING=adaptive", 'ROUTING="adaptive"'), ("fleet.toml", 'dialect = "podman"\n# Each replica',
                                                           'dialect = "systemd"\n# Each replica')], "passed"),
    ([(CONFIG, "AFFINITY_BYTES=4096", "AFFINITY_BYTES=1024")], "proxy-routing/affinity-window"),
    ([(CONFIG, "AFFINITY_BYTES=4096", "AFFINITY_BYTES=4097")], "proxy-routing/affinity-window"),
], ids=["defaults", "roundrobin", "unknown-policy", "podman-quotes", "systemd-quotes", "narrower-window", "one-byte-wider"])
def test_routing(tmp_path: Path, edits: list[Edit], code: str) -> None:
    assert _code("proxy-routing", edited_fleet(tmp_path, edits)) == code


ADMISSION = (CONFIG, "# LARGE_TOKENS=16384\n# LARGE_LIMIT=1", "LARGE_TOKENS=16384\nLARGE_LIMIT=1")


@pytest.mark.parametrize(("edits", "code"), [
    # (2 + 2) x 30,659 = 122,636: exactly the pool; one token more per conversation is over it.
    ([_load(3, 30659)], "passed"),
    ([_load(3, 30660)], "proxy-capacity/over-pool"),
    # Admission of one large request per card: 2 x 40,000 cached + 1 x 40,000 live fits where 2 + 2 do not ...
    ([_load(3, 40000)], "proxy-capacity/over-pool"),
    ([_load(3, 40000), ADMISSION], "passed"),
    # ... but not 2 x 50,000 + 50,000 (INC-40's sum); admission of requests over 64k holds no 40k one back.
    ([_load(3, 50000), ADMISSION], "proxy-capacity/over-pool"),
    ([_load(3, 40000), (CONFIG, "# LARGE_TOKENS=16384\n# LARGE_LIMIT=1", "LARGE_TOKENS=65536\nLARGE_LIMIT=1")],
     "proxy-capacity/over-pool"),
    # A third card: one conversation per card, 2 x 50,000 (the seed's other lever).
    ([_load(3, 50000), (CONFIG, "REPLICAS=http://127.0.0.1:7771 http://127.0.0.1:7772",
                        "REPLICAS=http://127.0.0.1:7771 http://127.0.0.1:7772 http://127.0.0.1:7774")], "passed"),
], ids=["at-the-pool", "one-over", "no-admission", "admission-fits", "inc-40-sum", "admission-above-the-load", "third-card"])
def test_capacity(tmp_path: Path, edits: list[Edit], code: str) -> None:
    assert _code("proxy-capacity", edited_fleet(tmp_path, edits)) == code


def test_without_replicas_the_capacity_cannot_be_judged(tmp_path: Path) -> None:
    fleet = load_fleet(edited_fleet(tmp_path, [(CONFIG, "REPLICAS=http://127.0.0.1:7771 http://127.0.0.1:7772\n", "")]))
    with pytest.raises(NotApplicable, match="names no REPLICAS"):
        get_check("proxy-capacity")(fleet)


def test_without_a_proxy_both_seams_say_what_to_declare(tmp_path: Path) -> None:
    fleet_toml = tmp_path / "fleet" / "fleet.toml"
    shutil.copytree(FLEET, fleet_toml.parent, symlinks=True)
    text = fleet_toml.read_text(encoding="utf-8")
    start = text.index("[proxies.frank-medium-proxy]")
    fleet_toml.write_text(text[:start] + text[text.index("[[timeouts]]", start):], encoding="utf-8")
    fleet = load_fleet(fleet_toml)
    for name in ("proxy-routing", "proxy-capacity"):
        reason = get_check(name).why_not(fleet)
        assert reason is not None and "declares no [proxies.NAME]" in reason


@pytest.mark.parametrize(("old", "new", "check"), [
    ("AFFINITY_BYTES=4096", "AFFINITY_BYTES=4k", "proxy-routing"),
    ("# LARGE_TOKENS=16384\n# LARGE_LIMIT=1", "LARGE_TOKENS=16384\nLARGE_LIMIT=0", "proxy-capacity"),
])
def test_a_bad_value_is_one_line_naming_file_and_line(tmp_path: Path, old: str, new: str, check: str) -> None:
    fleet_toml = edited_fleet(tmp_path, [(CONFIG, old, new)])
    with pytest.raises(InputError) as raised:
        get_check(check)(load_fleet(fleet_toml))
    config = fleet_toml.parent / CONFIG
    wrong = new.splitlines()[-1]
    assert raised.value.line == config.read_text(encoding="utf-8").splitlines().index(wrong) + 1
    assert str(config) in str(raised.value) and "expected a whole number" in str(raised.value)


def test_a_proxy_on_an_unknown_host_is_one_line(tmp_path: Path) -> None:
    fleet_toml = edited_fleet(tmp_path, [("fleet.toml", 'state = "retired"\nhost = "dankserver"\nconfig',
                                    'state = "retired"\nhost = "dankserverr"\nconfig')])
    with pytest.raises(InputError) as raised:
        load_fleet(fleet_toml)
    lines = fleet_toml.read_text(encoding="utf-8").splitlines()
    assert raised.value.line == lines.index('host = "dankserverr"') + 1
    assert "proxies.frank-medium-proxy.host: unknown host 'dankserverr'" in str(raised.value)
