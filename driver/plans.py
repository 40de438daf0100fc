"""The plan cache: the kernels a plan was built into, kept on disk so that a later process
loads them instead of scheduling, lowering, proving and compiling them again.

    PLANS.load(key) -> [Step] or None      PLANS.store(key, steps)
    plan_key(base, persistent, schedule, device) -> key

A plan is what compile() builds for an explicit schedule, or what the first call of a
size class builds for an automatic one: its steps, each with its scheduled fusion, kernel
IR (with its launch configuration and parameters), CUDA text and, for the GPU, cubin.
Its key is the sha256 of what decides those: the fusion (its structural signature and
name), the backend and compile options, which plan of it (persistent or segmented, the
automatic schedule's key), the device model it was chosen for, for the GPU the
architecture and NVRTC version, and compiler_version(), a hash of every module of
fuserir, lowering, codegen and driver, so a plan built by any other version of the
compiler is never loaded. An entry is written only after its kernels were built, which
includes their proofs (a kernel the verifiers refuse raises before it is stored): an
entry is a proved plan, and loading it proves nothing again.

Entries live in codegen.disk_cache.cache_root()/plans, beside the cubins and proofs, in
codegen.disk_cache's checked format (concurrent writers and corrupt files are handled as
there); the payload is a pickle, so the cache directory must be the user's own (as
~/.cache is). Kernels built for FUSERIR_DUMP_AFTER bypass it, so that their dumps print.
It sits in the driver, which owns what a plan is.
"""

import dataclasses
import functools
import hashlib
import pickle
import sys

import driver
import fuserir
import lowering
import numpy as np
from codegen import disk_cache
from codegen.disk_cache import Entries, cache_root

from .proofs import package_sources, sources_hash

_ENTRIES = Entries(b"fuserir-plan\x01")
_NAME = "plan"

# counters for tests and diagnostics
stats = {"hits": 0, "stores": 0, "rejects": 0, "write_errors": 0}


@functools.cache
def compiler_version():
    """A hash of every module of fuserir, lowering, codegen and driver (read once per
    process), with the Python and numpy versions the pickles depend on."""
    # (codegen's package found through one of its modules: its __init__ is the contract,
    # above the driver)
    return sources_hash(package_sources(fuserir, lowering, disk_cache, driver)) + \
        f"-py{sys.version_info[0]}.{sys.version_info[1]}-np{np.__version__}"


def plan_key(base, persistent, schedule, device):
    """The key of one plan: `base` names the fusion, backend, options and target (the
    compile driver's key of a compile, as text), the rest which plan of it."""
    text = repr((compiler_version(), base, persistent, schedule, device))
    return hashlib.sha256(text.encode()).hexdigest()


class PlanCache:
    def _path(self, key):
        return cache_root() / "plans" / f"{key}.plan"

    def load(self, key):
        """The steps stored under `key`, or None."""
        payload, rejected = _ENTRIES.read(self._path(key), key, _NAME)
        stats["rejects"] += rejected
        if payload is None:
            return None
        try:
            steps = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - an entry that does not load is rebuilt
            # (RecursionError included)
            stats["rejects"] += 1
            return None
        stats["hits"] += 1
        return steps

    def store(self, key, steps):
        """Keep `steps` (without the variants built for particular arrays) under `key`."""
        kept = [dataclasses.replace(step, variants={}) for step in steps]
        try:
            payload = pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            return          # not picklable (or nested past Python's recursion limit, as
            #                 a kernel of 1,000 inlined operations is): built again
        if _ENTRIES.write(self._path(key), key, _NAME, payload):
            stats["stores"] += 1
        else:
            stats["write_errors"] += 1


PLANS = PlanCache()
