"""llama-swap configs: any text read as llama-swap reads it, or one line (macros, matrix sets, merges included)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.sources.llama_swap import read_config
from tests.fuzz._oneline import assert_reads_or_one_line

PIECES = st.sampled_from([*"${}:-&|()+\"' \t\n#[],*<é\0", "models:\n", "  a:\n", "  b:\n", "    cmd: ", "    cmdStop: ",
                          "    proxy: ", "    ttl: ", "    macros:\n", "    aliases: [", "    env: [", "macros:\n",
                          "  m: ", "  n: ", "${m}", "${n}", "${PORT}", "${MODEL_ID}", "${PID}", "llama-server --port ",
                          "startPort: ", "groups:\n", "  g:\n", "    members: [a, b]\n", "    swap: false\n",
                          "matrix:\n", "  vars: {x: a}\n", "  sets:\n", "    s: ", "    t: ", "+s", "+t", "a & b",
                          "x | b", "1e999", "0x1F", "0777", "1_000", ".inf", "-0b101", "99999999999999999999", "true",
                          "<<: *d", "&d ", "\\\n"])
TEXT = st.lists(PIECES, max_size=60).map("".join)


@given(st.one_of(TEXT, st.text(max_size=200)))
def test_any_llama_swap_config_is_read_or_one_line(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        config = assert_reads_or_one_line(lambda: read_config(path))
        if not isinstance(config, BaseException):
            assert_reads_or_one_line(config.residencies)
