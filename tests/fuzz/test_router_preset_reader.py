"""Router presets: any text read as llama-server reads a ``--models-preset`` file, or one line; every model's argv
built or refused in one line; the sets of co-loaded models counted, and listed whenever the count is in bounds."""

from __future__ import annotations

import itertools
import math
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.sources.router_preset import MAX_RESIDENCIES, child_argv, load_on_startup, read_preset
from tests.fuzz._oneline import assert_reads_or_one_line

PIECES = st.sampled_from([*"[]=;# \t\n\r*é\0", "[*]\n", "[a]\n", "[b]\n", "[c]\n", "[ d ]\n", "c = 4096\n", "ctx-size",
                          "LLAMA_ARG_CTX_SIZE = 8\n", "model = /m.gguf\n", "no-jinja = true\n", "jinja = off\n",
                          "load-on-startup = true\n", "stop-timeout = 5\n", "version = 1\n", "override-kv = x\n",
                          "api-key = k\n", "port = 1\n", "ngl", " = ", "temp = 0.7 ; cold\n", "bogus-key = 1\n"])
TEXT = st.lists(PIECES, max_size=60).map("".join)


@given(st.one_of(TEXT, st.text(max_size=200)), st.integers(min_value=-1, max_value=6))
def test_any_preset_is_read_or_one_line(text: str, models_max: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "models.ini"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        preset = assert_reads_or_one_line(lambda: read_preset(path))
    if isinstance(preset, BaseException):
        return
    for name in preset.sections:
        assert_reads_or_one_line(lambda n=name: child_argv(preset, n, "llama-server", 11434))
    on_startup = [name for name, _ in load_on_startup(preset)]
    assert set(on_startup) <= set(preset.sections)
    names = sorted(preset.sections)
    every = not names or models_max <= 0 or models_max >= len(names)
    count = (1 if names else 0) if every else math.comb(len(names), models_max)
    assert preset.residency_count(models_max) == min(count, MAX_RESIDENCIES + 1)
    if count <= MAX_RESIDENCIES:
        listed = (((frozenset(names),),) if names else ()) if every else (
            tuple(frozenset(c) for c in itertools.combinations(names, models_max)),)
        assert preset.residencies(models_max) == listed
