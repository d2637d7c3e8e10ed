"""Compose files: any text read as a compose service or one line; interpolation of any text the same."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.manifest import load_fleet
from fleetgate.sources.compose import interpolate, read_compose
from tests.fuzz._oneline import assert_reads_or_one_line

PIECES = st.sampled_from([*"${}:-?+=\"' \t\n#[],&*<|>é\0", "services:\n", "  chat:\n", "    image: ", "    command: ",
                          "    entrypoint: ", "    env_file: ", "    environment:\n", "    ports:\n", "      - ",
                          "    volumes:\n", "    gpus: ", "    deploy:\n      resources:\n        reservations:\n",
                          "          devices:\n", "ghcr.io/ggml-org/llama.cpp:server-cuda", "vllm/vllm-openai:v0.13.0",
                          "${A:-x}", "${B:?no}", "$$", "8080:8080", "/srv:/m", "count: 1", "capabilities: [gpu]",
                          "<<: *a", "&a ", "../x.env", ".env"])
TEXT = st.lists(PIECES, max_size=60).map("".join)
FLEET = ('[fleet]\nname = "f"\n[hosts.h]\nram_gib = 8\ndevices = [{ name = "CUDA0", vram_bytes = 1073741824 }]\n'
         '[services.chat]\nhost = "h"\nport = 8080\nengine = "llama.cpp"\ncompose = "compose.yaml"\n')


@settings(deadline=None)
@given(st.one_of(TEXT, st.text(max_size=200)), st.one_of(TEXT, st.text(max_size=80)))
def test_any_compose_file_is_read_or_one_line(compose: str, dotenv: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "fleet.toml").write_text(FLEET, encoding="utf-8")
        (root / "compose.yaml").write_text(compose, encoding="utf-8", errors="surrogatepass")
        (root / ".env").write_text(dotenv, encoding="utf-8", errors="surrogatepass")
        fleet = load_fleet(root / "fleet.toml")
        assert_reads_or_one_line(lambda: read_compose(fleet, fleet.services["chat"]))


def _alias(anchors: int) -> st.SearchStrategy[str]:
    # an earlier anchor, the one being defined (itself), or one never defined
    return st.integers(0, anchors + 1).map(lambda i: f"*x{i}")


@st.composite
def _anchored_document(draw: st.DrawFn) -> str:
    """Anchors that alias, merge and nest each other: self-reference, bombs, deep nesting and the harmless."""
    lines = []
    for n in range(draw(st.integers(1, 14))):
        refs = draw(st.lists(_alias(n), min_size=1, max_size=12))
        depth = draw(st.integers(0, 260))
        shape = draw(st.sampled_from(["merge", "list", "nest", "scalar", "merge-self"]))
        if shape == "merge":
            value = f"{{<<: [{', '.join(refs)}], k{n}: v}}"
        elif shape == "merge-self":
            value = f"{{k: v, <<: *x{n}}}"
        elif shape == "list":
            value = f"[{', '.join(refs)}]"
        elif shape == "nest":
            value = "[" * depth + refs[0] + "]" * depth
        else:
            value = draw(st.sampled_from(["1", "'${A:-x}'", "~", "[]", "{}"]))
        lines.append(f"x{n}: &x{n} {value}\n")
    service = draw(st.sampled_from(["    <<: *x0\n", "    command: *x1\n", "    ports: *x0\n", "    environment: *x0\n", ""]))
    return "".join(lines) + "services:\n  chat:\n    image: ghcr.io/ggml-org/llama.cpp:server\n" + service


@settings(deadline=None)
@given(_anchored_document())
def test_aliases_merges_and_nesting_are_read_or_one_line(compose: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "fleet.toml").write_text(FLEET, encoding="utf-8")
        (root / "compose.yaml").write_text(compose, encoding="utf-8")
        fleet = load_fleet(root / "fleet.toml")
        assert_reads_or_one_line(lambda: read_compose(fleet, fleet.services["chat"]))


@given(st.text(st.sampled_from(list("${}:-?+AB_x ")), max_size=40))
def test_any_text_interpolates_or_says_why_not(text: str) -> None:
    assert_reads_or_one_line(lambda: interpolate(text, {"A": "1", "B": ""}, "c.yaml", 1))
