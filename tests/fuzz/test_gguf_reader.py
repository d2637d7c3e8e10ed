"""Hostile GGUF headers: whatever bytes a header holds, reading it is a profile or one InputError line.

A Hypothesis property over mutated copies of a tiny qwen35 GGUF's header (bytes flipped, integers
overwritten, the file cut short) and two hand-made cases the hostile-input issue names: a block_count flipped
by one byte (which must be refused before anything is sized by it) and a field of the wrong type. The sample
is the ``ci`` profile's (tests/fuzz/conftest.py); ``tox -e fuzz`` runs 10 000 examples.
"""

from __future__ import annotations

import itertools
import struct
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgate.errors import InputError
from fleetgate.models.gguf import read_header
from fleetgate.models.profile import load_profile
from tests.fuzz._oneline import assert_reads_or_one_line
from tests.ledger.tiny_models import Qwen35Shape, write_qwen35

_COUNTER = itertools.count()


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int]:
    path = write_qwen35(tmp_path_factory.mktemp("fuzz") / "tiny.gguf", Qwen35Shape(nextn=1))
    return path.read_bytes(), read_header(path).data_offset


def _value_offset(data: bytes, key: bytes) -> int:
    """Where the value of a scalar key starts (after the key's length, bytes and u32 type)."""
    at = data.index(key)
    return at + len(key) + 4


def _load(tmp: Path, data: bytes) -> object:
    path = tmp / f"m{next(_COUNTER)}.gguf"  # a new name each time: load_profile caches per file version
    path.write_bytes(data)
    return load_profile(path)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_header_is_a_profile_or_one_line(original: tuple[bytes, int], tmp_path: Path,
                                                 data: st.DataObject) -> None:
    raw, header_end = original
    buf = bytearray(raw)
    how = data.draw(st.sampled_from(["byte", "u32", "u64", "cut"]))
    at = data.draw(st.integers(min_value=4, max_value=header_end - 8))
    if how == "byte":
        buf[at] = data.draw(st.integers(min_value=0, max_value=255))
    elif how == "u32":
        struct.pack_into("<I", buf, at, data.draw(st.integers(min_value=0, max_value=(1 << 32) - 1)))
    elif how == "u64":
        struct.pack_into("<Q", buf, at, data.draw(st.integers(min_value=0, max_value=(1 << 64) - 1)))
    else:
        del buf[at:]
    result = assert_reads_or_one_line(lambda: _load(tmp_path, bytes(buf)))
    if isinstance(result, InputError):
        assert str(result).startswith(str(tmp_path))  # it names the file


def test_block_count_flipped_by_one_byte_is_refused_without_allocating(original: tuple[bytes, int],
                                                                       tmp_path: Path) -> None:
    raw, _ = original
    buf = bytearray(raw)
    at = _value_offset(raw, b"qwen35.block_count")
    assert struct.unpack_from("<I", buf, at)[0] == 9
    buf[at + 3] = 0x50  # 9 -> 1,342,177,289 blocks
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as caught:
            _load(tmp_path, bytes(buf))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "qwen35.block_count is 1342177289" in str(caught.value)
    assert peak < 64 << 20, f"{peak} bytes allocated to refuse it"


def test_a_field_of_the_wrong_type_names_file_and_field(original: tuple[bytes, int], tmp_path: Path) -> None:
    raw, _ = original
    buf = bytearray(raw)
    at = _value_offset(raw, b"qwen35.embedding_length")
    struct.pack_into("<I", buf, at - 4, 6)  # UINT32 -> FLOAT32: same width, a float where a count belongs
    with pytest.raises(InputError) as caught:
        _load(tmp_path, bytes(buf))
    message = str(caught.value)
    assert message.startswith(str(tmp_path)) and "qwen35.embedding_length is" in message
    assert "expected an unsigned integer" in message and "\n" not in message


def test_header_counts_beyond_the_file_are_refused_before_reading(original: tuple[bytes, int],
                                                                 tmp_path: Path) -> None:
    raw, _ = original
    buf = bytearray(raw)
    struct.pack_into("<Q", buf, 8, 1 << 40)  # tensor count
    with pytest.raises(InputError) as caught:
        _load(tmp_path, bytes(buf))
    assert f"claims {1 << 40} tensors" in str(caught.value)
