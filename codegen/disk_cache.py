"""fuserir's caches on disk: where they live, and one checked file per entry.

    cache_root()          fuserir.cache_dir's: $FUSERIR_CACHE_DIR, else
                          $XDG_CACHE_HOME/fuserir, else ~/.cache/fuserir; beside each other
                          under it: cubin/ (codegen.nvrtc), proofs/ and plans/ (the
                          driver's)
    Entries(magic)        .read(path, key, name, check) / .write(path, key, name, payload)

An entry is a header (the kind's magic, the entry's key, the name of what it holds, the
payload's length and sha256) followed by the payload. It is written to a temporary file
in the same directory and renamed into place (os.replace), so a reader never sees half a
file and concurrent writers of one key are harmless (both write the same bytes). It is
read back only when its header names the key and name asked for and its payload checks
out, so a file copied or renamed from another entry, cut short or corrupted is rebuilt,
never trusted. A cache is an optimisation only: where the directory cannot be read or
written, nothing is kept and everything is built again.

It sits in codegen, the lowest layer with a cache on disk (NVRTC's cubins); the driver
above keeps its proofs and plans beside them.
"""

import hashlib
import os
import struct
import tempfile

from fuserir.cache_dir import cache_root

__all__ = ["Entries", "cache_root"]

_NAME_BYTES = 128


class Entries:
    """Cache entries of one kind, told apart from other kinds by `magic` (bytes ending in
    a format version)."""

    def __init__(self, magic):
        self.magic = magic
        # magic, the entry's key (sha256), the name (its sha256 and the name padded),
        # payload length, payload sha256
        self.header = struct.Struct(f"<{len(magic)}s32s{_NAME_BYTES}sQ32s")

    def read(self, path, key, name, check=None):
        """(payload, rejected): the payload of the entry at `path` if its header names
        `key` (hex sha256) and `name` and the payload checks out (length, sha256 and
        `check(payload)` where given); else None, with rejected True where a file was
        there but not trusted."""
        try:
            data = path.read_bytes()
        except OSError:
            return None, False
        header = self.header
        if len(data) < header.size:
            return None, True
        magic, entry_key, entry_name, length, digest = header.unpack_from(data)
        payload = data[header.size:]
        ok = (magic == self.magic and entry_key == bytes.fromhex(key)
              and entry_name == _name_field(name) and length == len(payload)
              and hashlib.sha256(payload).digest() == digest
              and (check is None or check(payload)))
        return (payload, False) if ok else (None, True)

    def write(self, path, key, name, payload):
        """Write the entry (see the module header); False where it could not be."""
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}.",
                                       suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(self.header.pack(self.magic, bytes.fromhex(key), _name_field(name),
                                         len(payload), hashlib.sha256(payload).digest()))
                f.write(payload)
            os.replace(tmp, path)
            tmp = None
            return True
        except OSError:
            return False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def _name_field(name):
    return hashlib.sha256(name.encode()).hexdigest().encode() + \
        name.encode()[:_NAME_BYTES - 64].ljust(_NAME_BYTES - 64, b"\0")
