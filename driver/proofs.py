"""The proof cache: Hopper kernels the async verifier proved, remembered across processes
beside NVRTC's cubins and the plans, in codegen.disk_cache.cache_root()/proofs. One
empty file per proved kernel, named by the sha256 of the verifier's version and the
kernel's text as verified; only proofs are kept (a kernel with findings is checked
again).

It sits in the driver, which owns fuserir's caches on disk: lowering's verifier is a
function of the kernel alone (lowering.verify.async_protocol), and asks the ProofMemo the
driver hands lowering (lowering.pipeline.lower(..., proofs=PROOFS)) whether a text was
proved. The verifier's version is the hash of every module of lowering (the checks, the
kernel IR and its effects, the index arithmetic they evaluate with) and of fuserir (the
instruction descriptors, the op table, dtypes and numerics the checks read), so a proof
made by another version is never reused. The cache is an optimisation only: where the directory
cannot be written, kernels are proved again next time.
"""

import functools
import hashlib
from pathlib import Path

import fuserir
import lowering
from codegen.disk_cache import cache_root


def verifier_sources():
    """The modules a proof depends on: every module of lowering and of fuserir below it."""
    return package_sources(lowering, fuserir)


def package_sources(*packages):
    """Every module of `packages` (each given as the package or one of its modules:
    every module in its directory and below), sorted."""
    return sorted(path for package in packages
                  for path in Path(package.__file__).resolve().parent.rglob("*.py"))


def sources_hash(paths):
    """A hash of the files at `paths` (their names and contents)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def verifier_version():
    """A hash of verifier_sources() (read once per process)."""
    return sources_hash(verifier_sources())


class DiskProofs:
    """A lowering.verify.async_protocol.ProofMemo on disk, for one verifier version (the
    running one where None)."""

    def __init__(self, version=None):
        self.version = version

    def _path(self, text):
        version = self.version or verifier_version()
        return cache_root() / "proofs" / hashlib.sha256((version + text).encode()).hexdigest()

    def proved(self, text):
        return self._path(text).exists()

    def remember(self, text):
        path = self._path(text)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        except OSError:                  # a read-only cache: prove again next time
            pass


PROOFS = DiskProofs()
