"""GGUF headers named by a source: a URL read front to back by HTTP range requests (``fleetgate.models.rangeread``; the
tensor data never fetched), split GGUFs (``-00001-of-0000N``) read part by part and merged as the loader maps
them, and the profile of any source (``fleetgate profile``). A local file's header and the profile's derivation
are ``fleetgate.models.gguf``'s.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from fleetgate.errors import InputError
from fleetgate.models.gguf import (
    MAX_ARRAY,
    MIN_KV_BYTES,
    MIN_TENSOR_BYTES,
    Header,
    TensorInfo,
    gguf_package,
    profile_data,
    read_header,
    tensor_bytes,
)
from fleetgate.models.rangeread import DEFAULT_DEADLINE, DEFAULT_LIMIT, RangeReader, RemoteError, is_remote, redact, split_parts

__all__ = ["MAX_STRING", "SourceRead", "read_any_header", "read_remote_header", "source_profile"]

# the value types of a GGUF key (ggml/src/gguf.cpp, gguf_type): struct format and size of the scalars
_SCALARS: Mapping[int, tuple[str, int]] = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
    7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9
MAX_STRING = 16 << 20
"""No one string of a header (a chat template is the longest, ~100 KiB) is read past 16 MiB."""
_MAX_DIMS = 4  # GGML_MAX_DIMS


def _stream_header(src: Any, name: str) -> Header:
    """Parse a GGUF header from a ``RangeReader``: every count and length is checked against the file's size
    and the header cap before anything is allocated or read for it."""
    start = src.read(24)
    if len(start) < 24:
        raise src.error(f"truncated GGUF header: {len(start)} bytes; expected at least 24")
    if start[:4] != b"GGUF":
        raise src.error(f"not a GGUF file: starts with {bytes(start[:4])!r}, expected b'GGUF'")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", start, 4)
    if version not in (2, 3):
        raise src.error(f"GGUF version {version}; expected 2 or 3 (little-endian)")
    least = 24 + n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_BYTES
    bound = min(src.size, src.limit) if src.size is not None else src.limit
    if least > bound:
        what = f"the file's {src.size} bytes" if src.size is not None and src.size < src.limit else \
            f"the {src.limit >> 20} MiB header cap"
        raise src.error(f"the header claims {n_tensors} tensors and {n_kv} keys (at least {least} bytes), more "
                        f"than {what} can hold; expected a whole, unaltered GGUF")

    def scalar(code: int) -> Any:
        fmt, size = _SCALARS[code]
        return struct.unpack(fmt, src.read(size))[0]

    def room(nbytes: int, what: str) -> None:
        end = src.position + nbytes
        if end > bound:
            raise src.error(f"{what} claims {nbytes} bytes at byte {src.position}, past "
                            f"{'the file' if bound == src.size else 'the header cap'} ({bound} bytes); "
                            "expected a whole, unaltered GGUF")

    def string(what: str) -> bytes:
        (length,) = struct.unpack("<Q", src.read(8))
        if length > MAX_STRING:
            raise src.error(f"{what} claims a string of {length} bytes; expected at most {MAX_STRING >> 20} MiB")
        room(length, what)
        return bytes(src.read(length))

    def value(code: int, key: str) -> Any:
        if code in _SCALARS:
            return scalar(code)
        if code == _STRING:
            return string(f"key {key!r}")
        if code != _ARRAY:
            raise src.error(f"key {key!r} has value type {code}; expected a GGUF type 0-12")
        item = scalar(4)
        (count,) = struct.unpack("<Q", src.read(8))
        width = _SCALARS[item][1] if item in _SCALARS else 8 if item == _STRING else None
        if width is None:
            raise src.error(f"key {key!r} is an array of type {item}; expected numbers or strings")
        room(count * width, f"key {key!r} ({count} entries)")
        if count > MAX_ARRAY:
            if item in _SCALARS:
                src.skip(count * width)
            else:
                for _ in range(count):
                    (length,) = struct.unpack("<Q", src.read(8))
                    room(length, f"key {key!r}")
                    src.skip(length)
            return {"array_length": count}
        if item in _SCALARS:
            fmt, size = _SCALARS[item]
            return list(struct.unpack(f"<{count}{fmt[1]}", src.read(count * size)))
        return [string(f"key {key!r}") for _ in range(count)]

    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        raw_key = string("a key name")
        key = raw_key.decode("utf-8", errors="replace")
        code = scalar(4)
        got = value(code, key)
        if isinstance(got, bytes):
            try:
                got = got.decode("utf-8")
            except UnicodeDecodeError:
                continue
        elif isinstance(got, list) and got and isinstance(got[0], bytes):
            try:
                got = [g.decode("utf-8") for g in got]
            except UnicodeDecodeError:
                continue
        fields[key] = got
    infos = []
    for _ in range(n_tensors):
        tname = string("a tensor name").decode("utf-8", errors="replace")
        n_dims = scalar(4)
        if not 1 <= n_dims <= _MAX_DIMS:
            raise src.error(f"tensor {tname!r} has {n_dims} dimensions; expected 1 to {_MAX_DIMS}")
        dims = struct.unpack(f"<{n_dims}Q", src.read(8 * n_dims))
        type_code, offset = scalar(4), scalar(10)
        try:
            type_name = gguf_package().quantization_type(type_code).name
        except ValueError:
            raise src.error(f"tensor {tname!r} has ggml type {type_code}; expected a known ggml type") from None
        if any(d >= 1 << 40 for d in dims):
            raise src.error(f"tensor {tname!r} has shape {list(dims)}; expected dimensions below 2**40")
        infos.append((tname, type_name, tuple(int(d) for d in dims), int(offset)))
    alignment = fields.get("general.alignment", 32)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise src.error(f"general.alignment is {alignment!r}; expected a power of two")
    data_offset = -(-src.position // alignment) * alignment
    try:
        tensors = tuple(TensorInfo(name=n, ggml_type=t, shape=s, nbytes=tensor_bytes(t, s), offset=o)
                        for n, t, s, o in infos)
    except (KeyError, ZeroDivisionError):
        raise src.error("a tensor of a ggml type fleetgate cannot size; expected the types of ggml/src/ggml.c") from None
    if src.size is not None:
        for tensor in tensors:
            if (tensor.offset or 0) + tensor.nbytes > src.size - data_offset:
                raise src.error(f"tensor {tensor.name!r} ({tensor.nbytes} bytes at data offset {tensor.offset}) runs "
                                f"past the file's end ({src.size} bytes); expected a whole, unaltered GGUF")
    return Header(path=Path(name), file_bytes=src.size if src.size is not None else data_offset,
                  data_offset=data_offset, fields=fields, tensors=tensors)


@dataclass(frozen=True)
class SourceRead:
    """What reading a header by range cost: the proof that the file was not downloaded."""

    source: str
    file_bytes: int
    header_bytes: int
    transferred: int
    requests: int
    connections: int
    ignored_range: bool


def read_remote_header(source: str, *, limit: int | None = None, timeout: float = 20.0,
                       deadline: float | None = None) -> tuple[Header, SourceRead]:
    """A GGUF header by HTTP range requests (``hf://``, ``https://``, ``http://``), the tensor data never read;
    ``deadline`` (seconds, default ``rangeread.DEFAULT_DEADLINE``) bounds the whole read."""
    with RangeReader(source, limit=limit or DEFAULT_LIMIT, timeout=timeout,
                     deadline=DEFAULT_DEADLINE if deadline is None else deadline) as src:
        name = src.url.rsplit("/", 1)[-1].split("?", 1)[0]

        header = _stream_header(src, unquote(name))
        read = SourceRead(source=redact(source), file_bytes=header.file_bytes, header_bytes=header.data_offset,
                          transferred=src.transferred, requests=src.requests, connections=src.connections,
                          ignored_range=src.ignores_range)
    return header, read


def _merge_splits(parts: Sequence[Header], names: Sequence[str], where: Any) -> Header:
    """One header of a split GGUF's parts (gguf-split): the first part's keys, every part's tensors.

    ``split.count`` must equal the number of parts and ``split.no`` each part's index; a tensor's offset
    stays within its own part (the loader maps each part on its own: src/llama-model-loader.cpp).
    """
    first = parts[0]
    for i, (part, name) in enumerate(zip(parts, names, strict=True)):
        count, no = part.fields.get("split.count"), part.fields.get("split.no")
        if count is not None and (count != len(parts) or no != i):
            raise where(name, f"split.no {no} of split.count {count}; expected part {i} of {len(parts)}")
    tensors = tuple(t for part in parts for t in part.tensors)
    declared = first.fields.get("split.tensors.count")
    if isinstance(declared, int) and declared != len(tensors):
        raise where(names[0], f"split.tensors.count is {declared} but the {len(parts)} parts hold "
                              f"{len(tensors)} tensors; expected every part")
    return Header(path=first.path, file_bytes=sum(p.file_bytes for p in parts), data_offset=first.data_offset,
                  fields=first.fields, tensors=tensors)


def read_any_header(source: str, *, deadline: float | None = None) -> tuple[Header, list[SourceRead]]:
    """A local GGUF or a URL, split GGUFs (``-00001-of-0000N``) read part by part; errors are one line.
    ``deadline`` bounds each remote part's read (seconds)."""
    names = split_parts(source)
    if is_remote(source):
        results = [read_remote_header(name, deadline=deadline) for name in names]
        parts, reads = [h for h, _ in results], [r for _, r in results]

        def where(name: str, message: str) -> InputError:
            return RemoteError(name, message)
    else:
        parts, reads = [read_header(Path(name)) for name in names], []

        def where(name: str, message: str) -> InputError:
            return InputError(Path(name), None, message)
    header = parts[0] if len(parts) == 1 else _merge_splits(parts, names, where)
    return header, reads


def source_profile(source: str, *, deadline: float | None = None) -> tuple[dict[str, Any], list[SourceRead]]:
    """The profile data of a GGUF named by a path or a URL; a remote header's problems name the URL.
    ``deadline`` bounds each remote file's read (seconds; default ``rangeread.DEFAULT_DEADLINE``)."""
    header, reads = read_any_header(source, deadline=deadline)
    try:
        data = profile_data(header)
    except InputError as exc:
        if is_remote(source) and not isinstance(exc, RemoteError):
            raise RemoteError(source, exc.message) from None
        raise
    if is_remote(source):
        data["model"]["url"] = redact(source)  # the profile is shared: never a password or the token
    return data, reads
