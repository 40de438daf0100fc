"""The matmul scheduler's parameters: MatmulParams (tiles, stages, split-K, the Hopper
path's options) with the checks that name what is wrong, and the DSL's keys for them
(`matmul(splitk=..., ...)` in a schedule block).

It sits below the scheduler (fuserir.scheduler.matmul, which schedules with them) and the
heuristic (fuserir.scheduler.matmul_heuristic, which chooses them) so that both read one
definition.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..errors import ScheduleError
from ..instructions import CLUSTER_MAX, MMA_M16N8K16 as MMA, WGMMA

# split-K's ways to combine the splits: in turn (a turnstile), at once (each CTA of a tile
# sums a slice, in a fixed order), by atomic adds (opt-in: the last bits may differ run to
# run), in a second kernel, or at once through the shared memory of a thread-block
# cluster (the Hopper path: a tile's splits are one cluster of at most CLUSTER_MAX CTAs)
SPLITK_MODES = ("serial", "parallel", "atomic", "two_kernel", "cluster")


@dataclass
class MatmulParams:
    """How to schedule a matmul. Tiles are (M, N, K) in elements."""

    cta_tile: tuple = (128, 128, 32)
    warp_tile: tuple = (64, 64, 32)
    instruction_tile: tuple = MMA.shape        # the tensor-core instruction tile
    stages: int = 3
    splitk_factor: int = 1
    splitk_mode: str = "serial"
    splitk_interleaved: bool = False     # a split: every splitk-th K tile (split_k)
    use_smem_epilogue: bool = False
    promote_prologue_smem_reuse: bool = False
    # operands loaded asynchronously: cp.async on the mma.sync path, TMA on the Hopper
    # path (whose producer warp group copies them element-wise where False); a bool for
    # both operands or a pair (A, B) for each
    async_gmem_load_operands: bool | tuple = True
    # the Hopper path: the producer warp group's registers a thread, the rest given to
    # the consumers (circular_buffer(producer_registers=...)); None: no reallocation
    producer_registers: int | None = None
    # the Hopper path: (A, B), stage the operand with its K axis innermost although its
    # array's last axis is M (N). The heuristic sets it where that last axis has one
    # element (M = 1 with A stored K x M), so that K is the contiguous axis: TMA then
    # reads the operand's K runs as box rows instead of the producer copying elements
    staged_along_k: tuple = (False, False)
    # the Hopper path: the instruction's M runs along the output's N and its N along M
    # (the registers hold D^T = B^T A^T; B's tile is the wgmma's A operand). Tiles are
    # then named in the instruction's terms: cta_tile (rows along N, columns along M, K).
    # wgmma's N takes any multiple of 8 and its M multiples of 64, so an output whose M
    # is not a multiple of 64 (136x184) fits one tile this way and not the other
    swap_mn: bool = False
    # the Hopper path: a persistent kernel. Its grid is `ctas` CTAs (a run-time scalar,
    # by default the device's SMs) that walk the output tiles, tile t of CTA b being
    # b + t ctas, in one loop over (tile, K tile) pairs: the producer loads the next
    # tile's stages while the consumers run this tile's epilogue (staged through shared
    # memory of its own with use_smem_epilogue)
    persistent: bool = False
    # the Hopper path's staged output (use_smem_epilogue): the tile laid out as TMA boxes
    # of 128-byte rows and stored by TMA (one thread issues a box per 128 bytes of the
    # tile's rows, the hardware leaving out what lies past the output's edges) instead of
    # the consumer threads' copy by rows of 16 bytes
    tma_store: bool = False
    # the order the output tiles are walked in: G rows of tiles down one column, then the
    # next column, then the next G rows (Triton's grouped order: the CTAs running at once
    # read fewer distinct operand panels, which L2 then serves them); 1: a column of all
    # the rows at a time (blockIdx.x along M), or row by row for a persistent kernel
    tile_group: int = 1

    def __post_init__(self):
        for name in ("cta_tile", "warp_tile", "instruction_tile", "async_gmem_load_operands",
                     "staged_along_k"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                setattr(self, name, tuple(value))
        self.check()

    @property
    def async_loads(self):
        """(A, B): is each operand loaded asynchronously (async_gmem_load_operands)?"""
        value = self.async_gmem_load_operands
        return value if isinstance(value, tuple) else (value, value)

    @property
    def hopper(self):
        """Is this a Hopper schedule (wgmma + TMA: the instruction tile a wgmma's)?"""
        return self.instruction_tile[0] == WGMMA.m

    @property
    def warps(self):
        """Warps of the block's tile grid (on the Hopper path: warp groups, whose tiles
        warp_tile then names)."""
        return (self.cta_tile[0] // self.warp_tile[0]) * (self.cta_tile[1] // self.warp_tile[1])

    def check(self):
        def bad(why):
            raise ScheduleError(f"MatmulParams: {why}")

        for name in ("cta_tile", "warp_tile", "instruction_tile"):
            tile = getattr(self, name)
            if not isinstance(tile, tuple) or len(tile) != 3 or not all(isinstance(t, int) and not isinstance(t, bool)
                                         and t > 0 for t in tile):
                bad(f"{name} must be three positive integers (M, N, K), got {tile}")
        wgmma = [WGMMA.shape(n) for n in WGMMA.widths]
        if self.instruction_tile != MMA.shape and self.instruction_tile not in wgmma:
            bad(f"instruction_tile {self.instruction_tile}: the tensor-core instructions are "
                f"{MMA.name} {MMA.shape} and {WGMMA.name} (64, n, 16), n a multiple of 8 "
                "up to 256")
        for i, dim in enumerate("MNK"):
            if self.cta_tile[i] % self.warp_tile[i]:
                bad(f"cta_tile {dim} ({self.cta_tile[i]}) is not a multiple of warp_tile "
                    f"{dim} ({self.warp_tile[i]})")
            if self.warp_tile[i] % self.instruction_tile[i]:
                bad(f"warp_tile {dim} ({self.warp_tile[i]}) is not a multiple of the "
                    f"instruction tile {dim} ({self.instruction_tile[i]})")
        if self.cta_tile[2] != self.warp_tile[2]:
            bad(f"cta_tile K ({self.cta_tile[2]}) must equal warp_tile K "
                f"({self.warp_tile[2]}): warps split M and N, not K")
        if self.hopper:
            _check_hopper(self, bad)
        elif not 1 <= self.warps <= 32:
            bad(f"{self.warps} warps (cta_tile / warp_tile); a block has 1 to 32")
        if isinstance(self.stages, bool) or not isinstance(self.stages, int) \
                or self.stages < 1:
            bad(f"stages must be an integer >= 1, got {self.stages!r}")
        if isinstance(self.splitk_factor, bool) or not isinstance(self.splitk_factor, int) \
                or self.splitk_factor < 1:
            bad(f"splitk_factor must be an integer >= 1, got {self.splitk_factor!r}")
        if self.splitk_mode not in SPLITK_MODES:
            bad(f"splitk_mode {self.splitk_mode!r}: expected "
                + " or ".join(repr(m) for m in SPLITK_MODES))
        loads = self.async_gmem_load_operands
        if not (isinstance(loads, bool) or (isinstance(loads, tuple) and len(loads) == 2
                                           and all(isinstance(x, bool) for x in loads))):
            bad(f"async_gmem_load_operands must be true or false, or a pair of them (A, B), "
                f"got {loads!r}")
        if self.stages > 1 and not all(self.async_loads) and not self.hopper:
            bad("a pipeline (stages > 1) needs async_gmem_load_operands=True (on the "
                "mma.sync path: cp.async)")
        if self.producer_registers is not None and not self.hopper:
            bad("producer_registers: only the Hopper path has a producer warp group")
        along = self.staged_along_k
        if not (isinstance(along, tuple) and len(along) == 2
                and all(isinstance(x, bool) for x in along)):
            bad(f"staged_along_k must be a pair of true or false (A, B), got {along!r}")
        if any(along) and not self.hopper:
            bad("staged_along_k: only the Hopper path stages its operands by TMA boxes")
        if not isinstance(self.swap_mn, bool):
            bad(f"swap_mn must be true or false, got {self.swap_mn!r}")
        if self.swap_mn and not self.hopper:
            bad("swap_mn: only the Hopper path (wgmma) swaps the instruction's M and N")
        if isinstance(self.tile_group, bool) or not isinstance(self.tile_group, int) \
                or self.tile_group < 1:
            bad(f"tile_group must be an integer >= 1 (rows of tiles a group walks), got "
                f"{self.tile_group!r}")
        if not isinstance(self.persistent, bool):
            bad(f"persistent must be true or false, got {self.persistent!r}")
        if self.persistent and not self.hopper:
            bad("persistent: only the Hopper path (a producer warp group) walks tiles")
        if self.persistent and self.splitk_factor != 1:
            bad("persistent: K is not split (splitk_factor 1)")
        if self.persistent and self.promote_prologue_smem_reuse:
            bad("persistent: the staged output cannot reuse the operand stages "
                "(promote_prologue_smem_reuse): the producer loads the next tile into "
                "them during this one's epilogue")
        if self.splitk_mode == "cluster":
            if not self.hopper:
                bad("splitk_mode 'cluster': only the Hopper path (sm_90) has thread-block "
                    "clusters")
            if self.splitk_factor > CLUSTER_MAX:
                bad(f"splitk_mode 'cluster': the splits of a tile are one cluster of at "
                    f"most {CLUSTER_MAX} CTAs, not {self.splitk_factor}; use 'parallel' "
                    "for more splits")
            if self.use_smem_epilogue:
                bad("splitk_mode 'cluster': each CTA stores the elements it sums from the "
                    "registers (no use_smem_epilogue)")
        if not isinstance(self.tma_store, bool):
            bad(f"tma_store must be true or false, got {self.tma_store!r}")
        if self.tma_store and (not self.hopper or not self.use_smem_epilogue
                               or self.splitk_mode == "two_kernel"):
            bad("tma_store: TMA stores the Hopper path's staged output tile "
                "(use_smem_epilogue with a wgmma instruction tile, split-K not two_kernel)")
        if self.swap_mn and (self.use_smem_epilogue or self.splitk_mode == "two_kernel"):
            bad("swap_mn: the output is stored from the registers (no use_smem_epilogue) "
                "and split-K, if any, is serial, parallel or atomic (not two_kernel)")


HOPPER_K_TILE = 64            # elements: a K-major TMA box row of 128 bytes (16-bit operands)


def _check_hopper(params, bad):
    """What a Hopper schedule adds to MatmulParams.check."""
    groups = params.warps
    if not 1 <= groups <= 3:
        bad(f"{groups} consumer warp groups (cta_tile / warp_tile); the Hopper path has 1 "
            "to 3, plus the producer")
    if params.warp_tile[1] != params.instruction_tile[1]:
        bad(f"warp_tile N ({params.warp_tile[1]}) must equal the wgmma's n "
            f"({params.instruction_tile[1]}): one instruction spans a warp group's columns")
    if params.cta_tile[2] % HOPPER_K_TILE:
        bad(f"cta_tile K ({params.cta_tile[2]}) must be a multiple of {HOPPER_K_TILE} on "
            "the Hopper path (TMA boxes of 128-byte rows)")
    if params.stages < 2:
        bad("the Hopper path pipelines its TMA loads: stages must be at least 2")


# The DSL's short keys (the foundation issue's spelling) and the MatmulParams fields.
SHORT_KEYS = {"splitk": "splitk_factor", "smem_epilogue": "use_smem_epilogue"}


def params_from_keys(keys, error):
    """MatmulParams from the DSL's `matmul(key=value, ...)`. `error(key, message)` makes
    the exception to raise for a bad key. smem_epilogue=true implies
    promote_prologue_smem_reuse=true unless that is given or the kernel is persistent."""
    names = [f.name for f in fields(MatmulParams)]
    values, spelled = {}, {}
    for key, value in keys.items():
        field_name = SHORT_KEYS.get(key, key)
        if field_name not in names:
            raise error(key, f"matmul has no parameter '{key}' (short keys: "
                        f"{', '.join(SHORT_KEYS)}; fields: {', '.join(names)})")
        if field_name in values:
            raise error(key, f"matmul: '{spelled[field_name]}' and '{key}' name the same "
                        "parameter")
        values[field_name], spelled[field_name] = value, key
    if values.get("use_smem_epilogue") and "promote_prologue_smem_reuse" not in values \
            and not values.get("persistent"):
        values["promote_prologue_smem_reuse"] = True
    try:
        return MatmulParams(**values)
    except ScheduleError as e:
        bad = next((k for k in keys if SHORT_KEYS.get(k, k) in str(e)), next(iter(keys)))
        raise error(bad, str(e)) from None
