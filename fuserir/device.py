"""The device model: what schedulers and checks know of the GPU a fusion runs on.

One frozen record per device: compute capability, SM count, the shared memory one block
may opt in to, L2 size, launch limits. Every heuristic and every limit check takes one, so a schedule
chosen for a run is chosen for the device it runs on, and the same heuristic told the
same device gives the same answer. It sits in the front end (schedulers may not import
codegen); codegen builds the record of the GPU it finds (codegen.launch.device_model) and
falls back to DEFAULT, the H200 these kernels are tuned and checked on, where there is
none (compiling needs no GPU). The interpreter plans for INTERPRETER unless told a device:
tiles fitted to the sizes it is given, not an H200's.
"""

from dataclasses import dataclass, replace

from .errors import ScheduleError

MAX_THREADS_PER_BLOCK = 1024      # the same on every architecture since sm_30


@dataclass(frozen=True)
class Device:
    """A GPU as the schedulers see it."""

    name: str
    cc: tuple                 # compute capability (major, minor)
    sms: int                  # streaming multiprocessors
    shared_limit: int         # bytes of shared memory per block after opt-in
    l2_bytes: int             # L2 cache size
    # launch limits (the same on every architecture since sm_30; CUDA's table of
    # technical specifications): threads per block, per block dimension, blocks per grid
    # dimension, local memory per thread
    max_threads: int = MAX_THREADS_PER_BLOCK
    static_shared: int = 48 * 1024    # shared memory a block gets without opting in
    max_block: tuple = (1024, 1024, 64)
    max_grid: tuple = (2 ** 31 - 1, 65535, 65535)
    local_bytes: int = 512 * 1024
    # whether TMA may read the operands: False for a run whose arrays TMA cannot describe
    # (strides that are not multiples of 16 bytes; the executable says), so that the
    # schedules chosen for that run keep to cp.async
    tma: bool = True
    # tiles no larger than the sizes need (the interpreter's model: its cost is every
    # thread of a tile, used or not, and it has no SMs to fill)
    fit_tiles: bool = False
    # results the same bits every run: False lets a split-K sum its partials with atomic
    # adds where the heuristic would sum them in a fixed order (compile(deterministic=...))
    deterministic: bool = True
    # a deterministic split-K on at most 4 tiles of 64 rows with a short K sums through
    # thread-block clusters' shared memory (splitk_mode "cluster") instead of the arrival
    # counters or a serial split (faster at every such point measured: docs/perf.md);
    # False: no clusters (a GPU whose GPCs cannot hold 16 CTAs, or no cluster launch)
    cluster_split: bool = True

    @property
    def arch(self):
        """The real architecture kernels compile for: sm_90a on Hopper (its wgmma, TMA
        multicast and setmaxnreg need the `a` target), sm_XY below."""
        major, minor = self.cc
        return f"sm_{major}{minor}" + ("a" if major == 9 else "")

    def with_(self, **changes):
        """This device with some fields changed (a smaller shared memory, fewer SMs)."""
        return replace(self, **changes)

    def describe(self):
        return (f"{self.name} (sm_{self.cc[0]}{self.cc[1]}, {self.sms} SMs, "
                f"{self.shared_limit} B shared per block, {self.l2_bytes >> 20} MiB L2)")


H200 = Device("NVIDIA H200", (9, 0), sms=132, shared_limit=227 * 1024,
              l2_bytes=50 * 1024 * 1024)
DEFAULT = H200     # what schedules are chosen for where no GPU answers
# What the interpreter plans for unless told a device: the mma.sync path (sm_80's
# instructions, no asynchronous proxy to interleave) on tiles fitted to the sizes.
INTERPRETER = Device("CPU interpreter (an H200's limits)", (8, 0), sms=1,
                     shared_limit=H200.shared_limit, l2_bytes=H200.l2_bytes, fit_tiles=True)

# Shared memory per block after opt-in, by architecture (CUDA programming guide, table of
# technical specifications): what a report says where no GPU answers the question.
OPT_IN_SHARED = {"sm_75": 64 * 1024, "sm_80": 163 * 1024, "sm_86": 99 * 1024,
                 "sm_87": 163 * 1024, "sm_89": 99 * 1024, "sm_90": H200.shared_limit,
                 "sm_100": 227 * 1024, "sm_120": 99 * 1024}


def resolve(device):
    """`device`, or DEFAULT where it is None; a ScheduleError naming what was passed where
    it is not a Device."""
    if device is None:
        return DEFAULT
    if not isinstance(device, Device):
        raise ScheduleError(f"device must be a fuserir.device.Device (e.g. "
                            f"fuserir.device.H200.with_(shared_limit=...)), got "
                            f"{type(device).__name__}")
    return device
