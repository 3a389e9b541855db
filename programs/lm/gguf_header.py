"""A GGUF file's header read alone: its tensor table, and a check that the file is whole and GGUF before a loader
reads its weights.

A truncated download, a half-copied file or a file that is not GGUF would otherwise fail deep inside transformers'
loader with a ``struct.error``, after seconds of work. ``read_header`` reads the header, the metadata and the tensor
table (not the weights); ``check_gguf`` checks that every tensor's data lies inside the file. The header is parsed
here because ``gguf.GGUFReader`` reads every metadata array element by element, which takes seconds on a model's
vocabulary; the quantisation block sizes come from the ``gguf`` package.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
"""GGUF metadata value types of fixed size (the spec's type number -> ``struct`` format); 8 is a string, 9 an
array."""
_GGUF_STRING, _GGUF_ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    """One entry of a GGUF file's tensor table: its name, dimensions (innermost first, as GGUF stores them), GGML
    type (``gguf.GGMLQuantizationType``), and where its data lies in the file (``start``, absolute, and ``nbytes``)."""

    name: str
    dims: tuple[int, ...]
    kind: Any
    start: int
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """What a loader needs from a GGUF file's header: its architecture (``general.architecture``) and tensors."""

    architecture: str
    tensors: list[GGUFTensor]


def check_gguf(path: Path) -> None:
    """Raise ``ValueError`` naming ``path`` unless it is a whole GGUF file (version 2 or 3): the magic bytes, the
    metadata and the tensor table readable to their end, and every tensor's data inside the file.

    Only the header is read (the weights are not), so a truncated download, a half-copied file or a file that is
    not GGUF fails here within a second, before transformers' loader would fail deep inside with a ``struct.error``.
    """
    size = path.stat().st_size
    for tensor in read_header(path).tensors:
        if tensor.start + tensor.nbytes > size:
            raise ValueError(
                f"{path} is truncated: the data of tensor {tensor.name!r} ends at byte {tensor.start + tensor.nbytes}, "
                f"past the end of the file ({size} bytes); download or copy it again"
            )


def read_header(path: Path) -> GGUFHeader:
    """The architecture and tensor table of the GGUF file ``path`` (version 2 or 3); ``ValueError`` naming the file
    where the header is not GGUF or ends early. Lengths and counts are checked against the file's size before
    anything is read, so a corrupt header cannot make this allocate more than the file holds."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        reader = _Fields(path, handle, size)
        n_tensors, n_values = _preamble(reader)
        alignment, architecture = _metadata(reader, n_values)
        tensors = _tensor_table(reader, n_tensors)
        start = (handle.tell() + alignment - 1) // alignment * alignment  # the data begins at the next multiple
    return GGUFHeader(architecture, [GGUFTensor(n, d, k, start + o, b) for n, d, k, o, b in tensors])


class _Fields:
    """The fields of an open GGUF file's header, each read only where the file holds it: ``ValueError`` naming the
    file where a field, or the entries a count declares, would run past its end."""

    def __init__(self, path: Path, handle: Any, size: int) -> None:
        self.path, self.handle, self.size = path, handle, size

    def take(self, n: int, what: str) -> bytes:
        if self.handle.tell() + n > self.size:
            raise ValueError(
                f"{self.path} is truncated: its {what} runs past the end of the file ({self.size} bytes); "
                "download or copy it again"
            )
        return self.handle.read(n)

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        return self.take(self.scalar("Q", what), what).decode("utf-8", "replace")

    def expect(self, count: int, least: int, what: str) -> None:
        """Refuse ``count`` entries of at least ``least`` bytes each that the rest of the file cannot hold."""
        if self.handle.tell() + count * least > self.size:
            raise ValueError(
                f"{self.path} is truncated or corrupt: its {what} declares {count} entries, more than the file holds"
            )

    def skip_value(self, kind: int, what: str) -> None:
        """Read past a metadata value of GGUF type ``kind``."""
        if kind in _GGUF_SCALARS:
            self.take(struct.calcsize(_GGUF_SCALARS[kind]), what)
        elif kind == _GGUF_STRING:
            self.take(self.scalar("Q", what), what)
        elif kind == _GGUF_ARRAY:
            item, count = self.scalar("I", what), self.scalar("Q", what)
            if item in _GGUF_SCALARS:
                self.take(count * struct.calcsize(_GGUF_SCALARS[item]), what)
            else:
                self.expect(count, 8, what)  # a string's or an array's length field at least
                for _ in range(count):
                    self.skip_value(item, what)
        else:
            raise ValueError(f"{self.path} is not a valid GGUF file: {what} has unknown value type {kind}")


def _preamble(fields: _Fields) -> tuple[int, int]:
    """The magic bytes and version checked; the number of tensors and of metadata entries."""
    magic = fields.handle.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"{fields.path} is not a GGUF file: it starts with {magic!r}, not {GGUF_MAGIC!r}")
    version = fields.scalar("I", "header")
    if version not in GGUF_VERSIONS:
        raise ValueError(f"{fields.path}: GGUF version {version} is not supported (only {GGUF_VERSIONS})")
    return fields.scalar("Q", "header"), fields.scalar("Q", "header")


def _metadata(fields: _Fields, n_values: int) -> tuple[int, str]:
    """The metadata read past, but for the two entries a loader needs: the data's alignment and the architecture."""
    fields.expect(n_values, 12, "metadata")  # a key's length and a value's type at least
    alignment, architecture = 32, ""
    for index in range(n_values):
        key = fields.string(f"metadata entry {index}")
        kind = fields.scalar("I", f"metadata {key!r}")
        if key == "general.alignment" and kind in _GGUF_SCALARS:
            alignment = fields.scalar(_GGUF_SCALARS[kind], f"metadata {key!r}")
        elif key == "general.architecture" and kind == _GGUF_STRING:
            architecture = fields.string(key)
        else:
            fields.skip_value(kind, f"metadata {key!r}")
    if alignment < 1:
        raise ValueError(f"{fields.path} is not a valid GGUF file: general.alignment is {alignment}")
    return alignment, architecture


def _tensor_table(fields: _Fields, n_tensors: int) -> list[tuple[str, tuple[int, ...], Any, int, int]]:
    """Each tensor's name, dimensions, type, offset (from the data's start) and size in bytes."""
    fields.expect(n_tensors, 24, "tensor table")  # a name's length, the dimension count, type and offset at least
    tensors, names = [], set()
    for index in range(n_tensors):
        what = f"tensor table (tensor {index})"
        name = fields.string(what)
        if name in names:
            raise ValueError(f"{fields.path} is not a valid GGUF file: tensor {name!r} is in its tensor table twice")
        names.add(name)
        n_dims = fields.scalar("I", what)
        dims = struct.unpack(f"<{n_dims}Q", fields.take(8 * n_dims, what))
        kind, offset = fields.scalar("I", what), fields.scalar("Q", what)
        try:
            kind = GGMLQuantizationType(kind)
            block, block_bytes = GGML_QUANT_SIZES[kind]
        except (ValueError, KeyError):
            unknown = f"{fields.path} is not a valid GGUF file: tensor {name!r} has unknown type {kind}"
            raise ValueError(unknown) from None
        elements = 1
        for dim in dims:
            elements *= dim
        tensors.append((name, dims, kind, offset, elements // block * block_bytes))
    return tensors
