"""Hostile llama-swap configs and router presets (issue 30): each is read in a process of its own, which must end
within the bound with one line -- the file, the line and what was expected -- or the config as its consumer reads it.

Before: a macro ``1e999`` was an AssertionError; a chain of macros, each twice the one before, grew until memory ran
out; a matrix set nested 100 000 deep, or a chain of sets each naming the next, was a RecursionError, as was a
mapping merging itself; a preset of 200 models under the default ``--models-max`` 4 had its 64 million sets of
co-loaded models built at collection (MemoryError), and 1000 models loaded on startup were named in one refusal.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRESET_FLEET = REPO / "fixtures" / "fleets" / "router-preset"
BOUND_S = 60.0
"""What a case may take, start of the interpreter included (each of these ends in under a few seconds)."""

READ_SWAP = """
import sys
from pathlib import Path
from fleetgate.errors import InputError
from fleetgate.sources.llama_swap import read_config
try:
    config = read_config(Path(sys.argv[1]))
except InputError as error:
    print(error)
else:
    print({name: model.argv for name, model in config.models.items()})
"""

RENDER_PRESET = """
import sys
from pathlib import Path
from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from fleetgate.render.dispatch import render
fleet = load_fleet(Path(sys.argv[1]))
try:
    print(render(fleet, fleet.services["coder"]).argv)
except InputError as error:
    print(error)
"""

CO_RESIDENCE = """
import sys
from pathlib import Path
from fleetgate.checks import NotApplicable
from fleetgate.checks.seam_coresidence import co_resident_states
from fleetgate.manifest import load_fleet
try:
    print(co_resident_states(load_fleet(Path(sys.argv[1]))))
except NotApplicable as reason:
    print(f"not judged: {reason}")
"""


def _run(code: str, path: Path) -> str:
    """``code`` in a fresh interpreter on ``path``: its one line of output, after checking that it ended in time,
    cleanly and with nothing on stderr."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True,
                          timeout=BOUND_S, check=False, stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    assert (done.returncode, done.stderr) == (0, ""), done.stderr[-2000:]
    assert took < BOUND_S
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout[:2000]
    return lines[0]


def _swap(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_macro_past_a_float64_is_the_text_as_written(tmp_path: Path) -> None:
    # yaml.v3 keeps 1e999 a string (strconv.ParseFloat: value out of range); 0x1F and 0777 are ints in base 16 and 8
    path = _swap(tmp_path, "macros:\n  big: 1e999\n  hex: 0x1F\n  octal: 0777\n"
                           "models:\n  a:\n    cmd: llama-server --rope-freq-base ${big} -t ${hex} -b ${octal} --port ${PORT}\n")
    assert _run(READ_SWAP, path) == ("{'a': ('llama-server', '--rope-freq-base', '1e999', '-t', '31', '-b', '511', "
                                     "'--port', '5800')}")


def test_a_chain_of_doubling_macros_is_refused_at_two_mib(tmp_path: Path) -> None:
    # m01 is ${m00} twice, m02 is ${m01} twice, ... m30: 2**30 characters. Each step of the substitution (m30 first)
    # doubles the ${mNN} uses (6 characters each) after "llama-server " (13): after m12, 2**19 uses: 3145741
    # characters, the first size over 2 MiB (after m13: 2**18 * 6 + 13 = 1572877)
    macros = "".join(f'  m{i:02d}: "${{m{i - 1:02d}}}${{m{i - 1:02d}}}"\n' for i in range(1, 31))
    text = f"macros:\n  m00: x\n{macros}models:\n  a:\n    cmd: llama-server ${{m30}}\n"
    assert len(text) == 719  # 8 + 9 + 30 * 22 + 8 + 5 + 29 bytes
    path = _swap(tmp_path, text)
    assert _run(READ_SWAP, path) == (
        f"{path}:35: models.a.cmd: ${{m12}} makes it 3145741 characters, over the 2097152 an argv can hold (the kernel's "
        "ARG_MAX); expected macros that expand to a command that can run")


def test_a_matrix_set_nested_100000_deep_is_one_line(tmp_path: Path) -> None:
    path = _swap(tmp_path, "models:\n  a: {cmd: 'llama-server --port ${PORT}'}\nmatrix:\n  sets:\n"
                           f"    deep: \"{'(' * 100_000}a{')' * 100_000}\"\n")
    assert _run(READ_SWAP, path) == (f"{path}:5: matrix.sets.deep: ( nested more than 100 deep; expected models joined by "
                                     "& and |, ( ) and +SET")


def test_a_chain_of_2000_sets_each_naming_the_next_is_llama_swaps_total_bound(tmp_path: Path) -> None:
    # s1999 is expanded first (it names none), then s1998, ...: each one combination, and the 1001st, s999 on line
    # 5 + 999, passes llama-swap's 1000 in all
    chain = "".join(f"    s{i}: '+s{i + 1}'\n" for i in range(1999))
    path = _swap(tmp_path, f"models:\n  a: {{cmd: 'llama-server --port ${{PORT}}'}}\nmatrix:\n  sets:\n{chain}    s1999: a\n")
    assert _run(READ_SWAP, path) == (
        f"{path}:1004: matrix.sets.s999: the sets expand to more than 1000 combinations in all; expected fewer "
        "(llama-swap refuses: \"total expanded combinations exceed limit\")")


def test_a_mapping_merging_itself_is_one_line(tmp_path: Path) -> None:
    path = _swap(tmp_path, "models:\n  a: &a\n    cmd: llama-server --port ${PORT}\n    <<: *a\n")
    # the bounded YAML loader refuses it before the reader's own merge guard sees it, with go-yaml's reason
    assert _run(READ_SWAP, path) == (f"{path}:4: the alias *a lies inside the value of its own anchor &a (line 2), which "
                                     "would never end; expected llama-swap's config.yaml (go-yaml refuses: anchor 'a' "
                                     "value contains itself)")


def test_merges_of_merges_are_read_once_each(tmp_path: Path) -> None:
    # x4 merges x3 four times, which merges x2 four times, ...: 4**4 paths to x0, one mapping, read once each
    layers = "".join(f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}, *x{i - 1}, *x{i - 1}]}}\n" for i in range(1, 5))
    path = _swap(tmp_path, f"x0: &x0 {{cmd: 'llama-server --port ${{PORT}}'}}\n{layers}models:\n  a: *x4\n")
    assert _run(READ_SWAP, path) == "{'a': ('llama-server', '--port', '5800')}"


def test_merges_of_merges_past_go_yamls_aliasing_bound_are_one_line(tmp_path: Path) -> None:
    # 4**39 paths to x0: go-yaml (llama-swap's YAML library) refuses the document as excessive aliasing
    layers = "".join(f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}, *x{i - 1}, *x{i - 1}]}}\n" for i in range(1, 40))
    path = _swap(tmp_path, f"x0: &x0 {{cmd: 'llama-server --port ${{PORT}}'}}\n{layers}models:\n  a: *x39\n")
    assert _run(READ_SWAP, path) == (f"{path}:6: excessive aliasing: with the alias *x4 the document is mostly copies of "
                                     "anchored values; expected llama-swap's config.yaml whose aliases repeat less "
                                     "(go-yaml, which docker compose and llama-swap use, refuses it)")


def test_a_chain_of_300_merges_is_one_line(tmp_path: Path) -> None:
    # models.a is x299, which merges x298 (line 299), ...
    chain = "".join(f"x{i}: &x{i} {{<<: *x{i - 1}}}\n" for i in range(1, 300))
    path = _swap(tmp_path, f"x0: &x0 {{cmd: 'llama-server --port ${{PORT}}'}}\n{chain}models:\n  a: *x299\n")
    # the loader's depth bound (200 levels, aliases followed) comes before the reader's chain of 100 merges
    assert _run(READ_SWAP, path) == f"{path}:200: the alias *x198 nests the YAML deeper than 200 levels; expected llama-swap's config.yaml"


def test_a_chain_of_150_merges_is_one_line(tmp_path: Path) -> None:
    # within the loader's depth, past the reader's 100 merges: models.a is x149, which merges x148 (line 149), ...:
    # the 101st merge down the chain is x49's, on line 50
    chain = "".join(f"x{i}: &x{i} {{<<: *x{i - 1}}}\n" for i in range(1, 150))
    path = _swap(tmp_path, f"x0: &x0 {{cmd: 'llama-server --port ${{PORT}}'}}\n{chain}models:\n  a: *x149\n")
    assert _run(READ_SWAP, path) == (f"{path}:50: models.a: <<: merges nested more than 100 deep; expected a shallower "
                                     "chain of merged mappings")


def _preset_fleet(tmp_path: Path, sections: str) -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(PRESET_FLEET, target)
    (target / "config" / "models.ini").write_text(f"[qwen2.5-coder-14b]\nmodel = /models/coder.gguf\n{sections}",
                                                  encoding="utf-8")
    return target / "fleet.toml"


def test_a_preset_of_200_models_is_not_judged_for_co_residence_and_never_enumerated(tmp_path: Path) -> None:
    # any 4 (the default --models-max) of 200 models: 64 684 950 sets, never built
    extra = "".join(f"[m{i:03d}]\nmodel = /models/m{i}.gguf\n" for i in range(199))
    fleet_toml = _preset_fleet(tmp_path, extra)
    assert _run(CO_RESIDENCE, fleet_toml) == (
        "not judged: the router of models.ini can keep any 4 of its 200 models loaded: more than the 20000 "
        "combinations this check enumerates: declare a smaller models_max (the router's --models-max) for its services")


def test_1000_models_loaded_on_startup_are_one_short_line(tmp_path: Path) -> None:
    # 1000 sections after the coder's (lines 1-2), three lines each: m000's load-on-startup is line 5, and m004's,
    # the fifth over --models-max 4 (the coder loads on demand), line 5 + 4 * 3
    extra = "".join(f"[m{i:03d}]\nmodel = /models/m{i}.gguf\nload-on-startup = true\n" for i in range(1000))
    fleet_toml = _preset_fleet(tmp_path, extra)
    said = _run(RENDER_PRESET, fleet_toml)
    assert said == (f"{fleet_toml.parent / 'config' / 'models.ini'}:17: 1000 models load on startup (m000, m001, m002, "
                    "m003, m004, m005, m006, m007 and 992 more) and the router keeps 4 (--models-max): llama-server "
                    "refuses to start (\"number of models to load on startup exceeds models_max\"); expected at most "
                    "models_max sections with load-on-startup = true")
