"""Reading ZIP members from untrusted archives without trusting the archive.

zipfile parses the central directory; this module adds what a loader of untrusted bytes
needs on top: no two members with one name, no member overlapping another or running
past the end of the file (so one compressed stream cannot be inflated under several
names), only stored or deflated members, none encrypted, and reads that inflate at most
the size the caller expects (checked against the directory before anything is inflated,
and again while streaming). Every failure of the archive itself, whatever zipfile, zlib
or struct raise for it, becomes the caller's error type.
"""
from __future__ import annotations

import io
import struct
import zipfile
import zlib

# what zipfile, zlib and the file object raise for damaged archives
ZIP_ERRORS = (zipfile.BadZipFile, EOFError, ValueError, OverflowError, OSError,
              struct.error, zlib.error, NotImplementedError)

_LOCAL_HEADER = struct.Struct("<4s22xHH")        # signature, name length, extra length
_LOCAL_MAGIC = b"PK\x03\x04"
_DEFLATE_MAX_RATIO = 1032                         # deflate never inflates more than this
_CHUNK = 1 << 20


class SafeZip:
    """The members of an in-memory ZIP archive, checked for layout.

    fail(detail) must return the exception to raise for a damaged archive."""

    def __init__(self, data, fail):
        self.fail = fail
        try:
            self.zf = zipfile.ZipFile(io.BytesIO(data))
            infos = self.zf.infolist()
        except ZIP_ERRORS as e:
            raise fail(f"not a readable ZIP archive: {e}") from None
        self.infos = {}
        for info in infos:
            if info.filename in self.infos:
                raise fail(f"duplicate archive member {info.filename!r}")
            self.infos[info.filename] = info
        self._check_layout(data, infos)

    def _check_layout(self, data, infos):
        spans = []
        for info in infos:
            start = info.header_offset
            head = data[start:start + _LOCAL_HEADER.size] if start >= 0 else b""
            if len(head) < _LOCAL_HEADER.size or head[:4] != _LOCAL_MAGIC:
                raise self.fail(f"archive member {info.filename!r} has no local header")
            _, name_len, extra_len = _LOCAL_HEADER.unpack(head)
            end = start + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size
            if end > len(data):
                raise self.fail(f"archive member {info.filename!r} runs past the end of "
                                "the file")
            spans.append((start, end, info.filename))
        spans.sort()
        for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
            if start < end:
                raise self.fail(f"archive members {first!r} and {second!r} overlap")

    @property
    def names(self):
        return list(self.infos)

    def close(self):
        self.zf.close()

    def _check_info(self, info):
        if info.flag_bits & 0x1:
            raise self.fail(f"archive member {info.filename!r} is encrypted")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.compress_size != info.file_size:
                raise self.fail(f"stored archive member {info.filename!r} declares "
                                f"{info.compress_size} bytes stored but {info.file_size} "
                                "bytes of content")
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            if info.file_size > _DEFLATE_MAX_RATIO * info.compress_size + 64:
                raise self.fail(f"archive member {info.filename!r} declares more content "
                                f"({info.file_size} bytes) than {info.compress_size} "
                                "deflated bytes can hold")
        else:
            raise self.fail(f"archive member {info.filename!r} uses compression method "
                            f"{info.compress_type}; only stored and deflated are read")

    def open(self, name, size=None, what=None):
        """An open member whose declared content size is `size` (when given)."""
        info = self.infos[name]
        what = what or f"archive member {name!r}"
        self._check_info(info)
        if size is not None and info.file_size != size:
            raise self.fail(f"{what} holds {info.file_size} bytes, expected {size}")
        try:
            return self.zf.open(info)
        except ZIP_ERRORS as e:
            raise self.fail(f"{what}: {e}") from None

    def declared_size(self, name):
        return self.infos[name].file_size

    def read_from(self, fh, size, what):
        """Reads the rest of an open member (a bytearray), which must be exactly `size`
        bytes; never inflates more than size + 1 bytes."""
        out = bytearray(size)
        view = memoryview(out)
        pos = 0
        try:
            while pos < size:
                chunk = fh.read(min(_CHUNK, size - pos))
                if not chunk:
                    break
                view[pos:pos + len(chunk)] = chunk
                pos += len(chunk)
            extra = fh.read(1) if pos == size else b""
        except ZIP_ERRORS as e:
            raise self.fail(f"{what}: {e}") from None
        finally:
            view.release()
        if pos != size or extra:
            raise self.fail(f"{what} does not hold the {size} bytes it declares")
        return out

    def read(self, name, size, what=None):
        """The content of member `name`, which must be exactly `size` bytes."""
        what = what or f"archive member {name!r}"
        with self.open(name, size, what) as fh:
            return self.read_from(fh, size, what)
