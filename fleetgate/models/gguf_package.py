"""What fleetgate takes of the ``gguf`` package, and of numpy under it (about 160 ms to import together): the header
reader, the quantisation types' sizes and names, llama.cpp's file types. ``fleetgate.models.gguf.gguf_package``
imports this module where a header is read or an uncommon type sized: a seam that sizes a KV cache or reads a
profile never pays for it."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, LlamaFileType

__all__ = ["GGUFPackage", "Reader"]


class Reader(GGUFReader):
    """``GGUFReader``, told to step over the long arrays the ledger never reads.

    The stock reader decodes every element of every array one numpy slice at a time: a 262k-token
    vocabulary (tokens, scores, types) costs it about ten seconds. This subclass lets the package parse
    everything else (magic, version, scalar keys, tensor infos, alignment) and only skips arrays of more
    than ``max_array`` elements, keeping their length.
    """

    def __init__(self, path: Path, max_array: int) -> None:
        self.max_array = max_array  # read while the base class parses, in its __init__
        super().__init__(path)

    def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> Any:
        # slice a plain ndarray view of the map: np.memmap's per-slice bookkeeping dominates otherwise
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self.data.view(np.ndarray)
            self.__dict__["_plain"] = plain
        count = int(count)
        itemsize = np.dtype(dtype).itemsize
        arr = plain[offset: offset + itemsize * count].view(dtype=dtype)[:count]
        order = self.byte_order if override_order is None else override_order
        return arr.view(arr.dtype.newbyteorder(order))

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> Any:
        if GGUFValueType(raw_type) != GGUFValueType.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        alen = self._get(orig_offs + 4, np.uint64)
        count = int(alen[0])
        if count <= self.max_array:
            return super()._get_field_parts(orig_offs, raw_type)
        itype = GGUFValueType(int(raw_itype[0]))
        offs = orig_offs + 12
        if count > len(self.data) - offs:
            raise ValueError(f"an array of {count} entries at byte {orig_offs} runs past the file's end")
        scalar = self.gguf_scalar_to_np.get(itype)
        if scalar is not None:
            offs += count * np.dtype(scalar).itemsize
        elif itype == GGUFValueType.STRING:
            view = memoryview(self.__dict__["_plain"])
            unpack = struct.Struct("<Q").unpack_from
            for _ in range(count):
                offs += 8 + unpack(view, offs)[0]
        else:
            return super()._get_field_parts(orig_offs, raw_type)
        return offs - orig_offs, [raw_itype, alen], [], [GGUFValueType.ARRAY, itype]


class GGUFPackage:
    """The parts of ``gguf`` fleetgate uses, as one typed name for the one lazy import that reaches them."""

    reader = Reader
    quantization_type = GGMLQuantizationType
    file_type = LlamaFileType
    type_sizes: ClassVar[Mapping[str, tuple[int, int]]] = {qtype.name: sizes for qtype, sizes in GGML_QUANT_SIZES.items()}
