"""Static shared-memory bank-conflict report of a kernel in kernel IR.

`report(kernel, scalars)` lists every shared-memory access statement of a kir.Kernel (a
Store to a shared buffer, a Load of a shared buffer anywhere in a statement's expressions,
an LdMatrix, a CpAsync) with the worst bank-conflict degree any examined warp sees:
`conflicts(...)` keeps those above 1, `format_report(...)` prints a table. `fuserir
inspect` shows it per kernel.

Why here: it reads nothing but kernel IR and reasons about the same physical bytes as the
hazard analysis (buffer.byte_offset + index * itemsize in the block's pool, after
allocation and aliasing), so it sits next to kir and hazards in lowering/. It is an
analysis, not a pass: it changes nothing and is not in the pipeline; a scheduler or a test
can call it on any kernel, lowered or hand-built. It needs no GPU.

Hardware model (NVIDIA sm_80 / sm_90)
  * 32 banks of 4 bytes: the bank of byte address a of the pool is (a / 4) % 32.
  * A warp's access is split into phases: accesses of 4 bytes or less, all 32 lanes in one
    phase; 8 bytes, 2 phases of 16 lanes (0-15, 16-31); 16 bytes, 4 phases of 8 lanes;
    ldmatrix .x1/.x2/.x4, one phase per 8x8 matrix i, made of the 16-byte rows that lanes
    8i..8i+7 address (lanes past 8*num supply nothing).
  * The degree of a phase is the largest number of *distinct* 4-byte words that its
    active lanes touch in one bank (one word read by several lanes is a broadcast). An
    access of w bytes at address a touches the words a/4 .. (a + w - 1)/4. Degree 1 is
    conflict free; degree d needs d wavefronts.
  * Width: a kir.Load / kir.Store is `width` elements of `itemsize` bytes (width > 1: a
    vector copy); CpAsync is `nbytes` wide; an ldmatrix row 16 bytes.

Evaluation
  Addresses are evaluated per thread with numpy over the whole block at once, by
  kir.LaneEvaluator (C integer rules in the node's dtype: / and % truncate toward zero,
  results wrap to 32/64 bits; Select, && and || evaluate lazily, as the emitted C does).
  Lanes are active where every enclosing IfThenElse (and every Select arm / && / ||
  operand around a Load) lets them through; threads beyond the block size do not exist.
  blockIdx is `block` (default 0, 0, 0), or for an access no lane of that block makes, the
  grid's last block (where a serial split-K's last split runs the epilogue). Every warp of
  the block is examined, at every combination of the enclosing loops' first
  `max_iterations` values plus their last value (an extent is evaluated with the outer
  loops' values and must be the same for every active thread), at most `max_combinations`
  combinations (a note says when that cut the search).
  What cannot be evaluated makes the entry unknown (worst None) with a note: an address
  that depends on a load (or a shuffle), a scalar missing from `scalars` (the report needs
  sizes), a thread-dependent loop extent, float arithmetic, an operator this evaluator
  does not know. A guard that depends on a load is assumed taken by every lane (more
  lanes can only raise a degree, so the report stays an upper bound), with a note.
"""

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from fuserir.numerics import ceil_div, round_up
from .. import kir
from .accesses import shared_accesses

__all__ = ["AccessReport", "Example", "report", "conflicts", "format_report", "BANKS",
           "BANK_BYTES"]

BANKS = 32
BANK_BYTES = 4
WARP = 32


class Unknown(Exception):
    """Something the static evaluation cannot know (the entry's note says what)."""


@dataclass
class Example:
    """Where the worst degree was first seen: the warp, the loop values, the phase, the
    bank, the distinct 4-byte words (pool word indices: byte address / 4) that hit it and
    the lanes that touch them."""

    warp: int
    iteration: dict
    phase: int
    bank: int
    words: list
    lanes: list

    def __str__(self):
        its = " ".join(f"{k}={v}" for k, v in self.iteration.items())
        return (f"warp {self.warp}{', ' + its if its else ''}, phase {self.phase}, bank "
                f"{self.bank}: words {', '.join(map(str, self.words))} (lanes "
                f"{', '.join(map(str, self.lanes))})")


@dataclass
class AccessReport:
    """One shared-memory access of one statement.

    kind: "store", "load", "ldmatrix" or "cp.async"; access: the access's printed form
    (the Load or the indexed buffer); width: bytes per lane (ldmatrix: per row);
    lanes_per_phase / phases: how a warp instruction splits; worst: the largest conflict
    degree seen (1 = conflict free, 0 = no lane ever active in what was examined, None =
    unknown: see notes); examined: (loop combination, warp, phase) triples with an
    active lane; iterations: loop combinations examined."""

    stmt: object
    label: str
    statement: str
    kind: str
    buffer: str
    access: str
    width: int
    lanes_per_phase: int
    phases: int
    worst: int = None
    example: Example = None
    examined: int = 0
    iterations: int = 0
    notes: list = field(default_factory=list)

    def to_dict(self):
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "stmt"}
        data["example"] = dataclasses.asdict(self.example) if self.example else None
        data["example_text"] = str(self.example) if self.example else None
        return data


# ---------------------------------------------------------------------------------------
# Integer evaluation per thread
# ---------------------------------------------------------------------------------------

class _Evaluator(kir.LaneEvaluator):
    """Values of kir scalar expressions for an array of linear thread ids `tids` (x
    fastest), with uniform loop values in `env`: kir.LaneEvaluator (lazy, integers only)
    with the block's thread and block indices, the report's scalars, and Unknown for
    what has no value (a load, a shuffle, a float, a division by zero)."""

    indices_only = True

    def __init__(self, scalars, block_dims, block, grid):
        self.scalars = dict(scalars)
        self.block_dims = block_dims
        self.block = block
        self.grid = grid
        self.loops = {}

    def coords(self, tids):
        bx, by, _ = self.block_dims
        return {"x": tids % bx, "y": (tids // bx) % by, "z": tids // (bx * by)}

    def value(self, e, tids, env):
        """e's value per thread of `tids` (an array of their length)."""
        self.loops = env
        return np.broadcast_to(self.ev(e, tids), tids.shape)

    def _var(self, e, tids):
        if not e.user and e.name in self.loops:   # a loop index (a user's size is not)
            v = self.loops[e.name]
        elif e.name in self.scalars:
            v = self.scalars[e.name]
        else:
            raise Unknown(f"no value for scalar {e.name} (the report needs sizes)")
        if e.dtype.is_float:
            raise Unknown(f"float scalar {e.name} in an index")
        return kir.lane_constant(v, e.dtype)

    def _special(self, e, tids):
        axis = "xyz".index(e.axis)
        if e.kind is kir.SpecialKind.threadIdx:
            return self.coords(tids)[e.axis].astype(e.dtype.numpy)
        if e.kind is kir.SpecialKind.blockIdx:
            return kir.lane_constant(self.block[axis], e.dtype)
        if e.kind is kir.SpecialKind.blockDim:
            return kir.lane_constant(self.block_dims[axis], e.dtype)
        if self.grid is None:
            raise Unknown("gridDim has no value (the launch grid needs sizes)")
        return kir.lane_constant(self.grid[axis], e.dtype)

    def _load(self, e, tids):
        raise Unknown(f"the address depends on a load ({kir.format_expr(e)})")

    def _shuffle(self, e, tids):
        raise Unknown(f"the address depends on a shuffle ({kir.format_expr(e)})")

    def _divisor(self, e, b):
        if np.any(b == 0):
            raise Unknown(f"integer division by zero in {kir.format_expr(e)}")

    def _refuse(self, e, why):
        if isinstance(e, kir.Const):
            raise Unknown(f"float constant {kir.format_expr(e)} in an index")
        if isinstance(e, kir.Cast):
            raise Unknown(f"cast {e.a.dtype} -> {e.dtype} in an index")
        if isinstance(e, kir.UnOp):
            raise Unknown(f"unary {e.op} on {e.dtype} in an index")
        if isinstance(e, kir.BinOp) and not e.dtype.is_int:
            raise Unknown(f"{e.dtype} arithmetic ({kir.format_expr(e)}) in an index")
        if isinstance(e, kir.BinOp):
            raise Unknown(f"operator {e.op} in an index")
        raise Unknown(f"{type(e).__name__} in an index")


# ---------------------------------------------------------------------------------------
# Finding the accesses
# ---------------------------------------------------------------------------------------

@dataclass
class _Access:
    stmt: object
    kind: str
    buffer: object
    index: object            # element index expression (per lane)
    width: int
    chain: list              # enclosing ("loop", ForLoop) / ("if", cond, taken) outermost first
    conds: list              # (cond, taken) inside the statement's expression
    access: str
    num: int = 0             # ldmatrix matrices
    lanes: int = None        # the first lanes of a warp that access (None: every lane)


def _accesses(stmts, chain=()):
    chain = list(chain)
    for s in stmts:
        for a in shared_accesses(s):
            if a.via == "load":
                text = kir.format_expr(a.load)
            else:
                text = f"{a.buffer.name}[{kir.format_expr(a.index)}]"
            kind = "load" if a.via == "load" else a.via
            yield _Access(s, kind, a.buffer, a.index, a.nbytes, chain, a.conds, text,
                          num=a.matrices, lanes=a.lanes)
        if isinstance(s, kir.ForLoop):
            yield from _accesses(s.body, chain + [("loop", s)])
        elif isinstance(s, kir.IfThenElse):
            yield from _accesses(s.then_body, chain + [("if", s, True)])
            yield from _accesses(s.else_body, chain + [("if", s, False)])
        else:
            for body in s.bodies():
                yield from _accesses(body, chain)


def _phases(acc):
    """(lanes per phase, phases per warp instruction)."""
    if acc.kind == "ldmatrix":
        return 8, acc.num
    if acc.width <= 4:
        return 32, 1
    if acc.width <= 8:
        return 16, 2
    return 8, 4


def _offsets(kernel, scalars):
    """{Buffer: byte offset} of every shared allocation; unplaced buffers go after the
    placed ones, 16-byte aligned (as codegen.interp places them)."""
    offsets, unplaced, end = {}, [], 0
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared:
            b = s.buffer
            size = kir.evaluate_scalar(b.size, scalars) * b.dtype.itemsize
            if b.byte_offset is None:
                unplaced.append((b, size))
            else:
                offsets[b] = kir.evaluate_scalar(b.byte_offset, scalars)
                end = max(end, offsets[b] + size)
    for b, size in unplaced:
        end = round_up(end, 16)
        offsets[b] = end
        end += size
    return offsets


# ---------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------

def report(kernel, scalars=None, max_iterations=2, block=(0, 0, 0), max_combinations=4096):
    """One AccessReport per shared-memory access of `kernel` (program order; a statement
    with several shared loads gets one entry per Load). `scalars`: {name: value} of the
    kernel's scalar parameters (sizes); `block`: the blockIdx examined."""
    scalars = dict(scalars or {})
    reports = []
    accesses = list(_accesses(kernel.body))
    if not accesses:
        return reports
    setup_error = None
    try:
        dims = tuple(int(kir.evaluate_scalar(e, scalars)) for e in kernel.launch.block)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
        dims, setup_error = None, f"the block size has no value: {error}"
    try:
        grid = tuple(int(kir.evaluate_scalar(e, scalars)) for e in kernel.launch.grid)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        grid = None
    offsets = {}
    if setup_error is None:
        try:
            offsets = _offsets(kernel, scalars)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            setup_error = f"the shared-memory layout has no value: {error}"
    ev = None if dims is None else _Evaluator(scalars, dims, tuple(block), grid)
    last = None
    if dims is not None and grid is not None and tuple(g - 1 for g in grid) != tuple(block):
        last = _Evaluator(scalars, dims, tuple(g - 1 for g in grid), grid)
    for acc in accesses:
        lanes, phases = _phases(acc)
        r = AccessReport(acc.stmt, acc.stmt.label, kir.format_stmt(acc.stmt).split("  //")[0],
                         acc.kind, acc.buffer.name, acc.access, acc.width, lanes, phases)
        if setup_error is not None:
            r.notes.append(setup_error)
        else:
            base = offsets.get(acc.buffer)
            if base is None:
                base = next((o for b, o in offsets.items() if b.name == acc.buffer.name), None)
            if base is None:
                r.notes.append(f"buffer {acc.buffer.name} has no shared allocation")
            else:
                try:
                    _examine(r, acc, ev, base, dims, max_iterations, max_combinations)
                    if r.worst == 0 and last is not None:
                        r = _in_last_block(r, acc, last, base, dims, max_iterations,
                                           max_combinations)
                except Unknown as why:
                    r.worst, r.example = None, None
                    r.notes.append(f"unknown: {why}")
        reports.append(r)
    return reports


def _in_last_block(r, acc, ev, base, dims, max_iterations, max_combinations):
    """r examined again in the grid's last block, where no lane of `block` made the access
    (the last split of a serial split-K runs the epilogue; edge tiles take other
    branches); r itself if no lane is active there either."""
    again = dataclasses.replace(r, worst=None, example=None, examined=0, iterations=0,
                                notes=[])
    _examine(again, acc, ev, base, dims, max_iterations, max_combinations)
    if again.worst == 0:
        return r
    again.notes.append(f"examined in block {ev.block}: no lane is active in the first "
                       "block")
    return again


def conflicts(kernel, scalars=None, **options):
    """The entries of report(...) whose worst degree is above 1."""
    return [r for r in report(kernel, scalars, **options) if r.worst is not None and r.worst > 1]


def _iterations(acc, ev, tids, max_iterations, max_combinations, notes):
    """(loop values, active thread ids) for each examined combination of the enclosing
    loops, with the enclosing guards applied."""
    count = 0

    def go(pos, env, active):
        nonlocal count
        if len(active) == 0:
            return
        if pos == len(acc.chain):
            count += 1
            yield dict(env), active
            return
        item = acc.chain[pos]
        if item[0] == "if":
            _, stmt, taken = item
            try:
                cond = ev.value(stmt.cond, active, env) != 0
            except Unknown as why:
                note = (f"guard {stmt.label} not evaluated ({why}): assumed taken by every "
                        "lane")
                if note not in notes:
                    notes.append(note)
                cond = np.full(len(active), taken)
            yield from go(pos + 1, env, active[cond == taken])
            return
        loop = item[1]
        extent = ev.value(loop.extent, active, env)
        if np.any(extent != extent[0]):
            raise Unknown(f"loop {loop.label} ({loop.var.name}) has a thread-dependent extent")
        n = int(extent[0])
        values = sorted(set(range(min(n, max_iterations))) | ({n - 1} if n > 0 else set()))
        for value in values:
            if count >= max_combinations:
                note = (f"stopped after {max_combinations} loop combinations "
                        "(max_combinations)")
                if note not in notes:
                    notes.append(note)
                return
            env[loop.var.name] = value
            yield from go(pos + 1, env, active)
        env.pop(loop.var.name, None)

    yield from go(0, {}, tids)


def _examine(r, acc, ev, base, dims, max_iterations, max_combinations):
    threads = dims[0] * dims[1] * dims[2]
    tids = np.arange(threads, dtype=np.int64)
    itemsize = acc.buffer.dtype.itemsize
    lanes_per_phase, phases = r.lanes_per_phase, r.phases
    nwords = ceil_div(acc.width, BANK_BYTES) + 1          # a misaligned access may straddle
    worst, misaligned = 0, False
    loop_names = [item[1].var.name for item in acc.chain if item[0] == "loop"]
    for env, active in _iterations(acc, ev, tids, max_iterations, max_combinations, r.notes):
        r.iterations += 1
        for cond, taken in acc.conds:
            try:
                c = ev.value(cond, active, env) != 0
            except Unknown as why:
                note = (f"condition {kir.format_expr(cond)} not evaluated ({why}): "
                        "assumed to let every lane through")
                if note not in r.notes:
                    r.notes.append(note)
                continue
            active = active[c == taken]
        if acc.lanes is not None:        # ldmatrix: lanes past 8*num supply nothing
            active = active[active % WARP < acc.lanes]
        if len(active) == 0:
            continue
        index = ev.value(acc.index, active, env).astype(np.int64)
        addr = base + index * itemsize
        if np.any(addr % min(acc.width, 16) != 0):
            misaligned = True
        lane = active % WARP
        warp = active // WARP
        phase = lane // lanes_per_phase
        first, last = addr // BANK_BYTES, (addr + acc.width - 1) // BANK_BYTES
        # every (lane, word) the access touches
        k = np.arange(nwords)
        words = first[:, None] + k[None, :]
        keep = words <= last[:, None]
        rows = np.nonzero(keep)[0]
        words = words[keep]
        group = (warp[rows] * phases + phase[rows])       # one (warp, phase) instance
        r.examined += len(np.unique(group))
        pairs = np.unique(np.stack([group, words]), axis=1)   # distinct words per instance
        bank_key = pairs[0] * BANKS + pairs[1] % BANKS
        keys, counts = np.unique(bank_key, return_counts=True)
        top = int(counts.max())
        if top > worst:
            worst = top
            key = keys[int(counts.argmax())]
            g, bank = divmod(int(key), BANKS)
            w, ph = divmod(g, phases)
            hit = sorted(int(x) for x in pairs[1][(pairs[0] == g) & (pairs[1] % BANKS == bank)])
            sel = (group == g) & np.isin(words, hit)
            r.example = Example(w, {n: env[n] for n in loop_names if n in env}, ph, bank, hit,
                                sorted(set(int(x) for x in lane[rows[sel]])))
    r.worst = worst
    if misaligned:
        r.notes.append(f"misaligned: some lane's address is not a multiple of "
                       f"{min(acc.width, 16)} bytes")
    if worst == 0:
        r.notes.append("no lane active in the examined warps and iterations")


# ---------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------

def format_report(reports, indent="", only_conflicts=False, access_width=60):
    """A text table: label, kind, buffer, bytes per lane, phases x lanes, worst degree and
    the access (cut to `access_width` characters), then the example (worst > 1) and any
    notes. Takes AccessReports or their to_dict() forms."""
    rows = [r.to_dict() if isinstance(r, AccessReport) else r for r in reports]
    if only_conflicts:
        rows = [r for r in rows if r["worst"] is not None and r["worst"] > 1]
    if not rows:
        return [f"{indent}no bank conflicts" if only_conflicts
                else f"{indent}no shared-memory accesses"]
    cells = []
    for r in rows:
        worst = "unknown" if r["worst"] is None else str(r["worst"])
        access = r["access"]
        if len(access) > access_width:
            access = access[:access_width - 1] + "\u2026"
        cells.append((r["label"], r["kind"], r["buffer"], f"{r['width']} B",
                      f"{r['phases']}x{r['lanes_per_phase']} lanes", f"worst {worst}", access))
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = []
    for r, c in zip(rows, cells):
        lines.append(indent + "  ".join(f"{c[i]:<{widths[i]}}" for i in range(len(c))).rstrip())
        if r["worst"] is not None and r["worst"] > 1 and r.get("example_text"):
            lines.append(f"{indent}    e.g. {r['example_text']}")
        for note in r["notes"]:
            lines.append(f"{indent}    note: {note}")
    return lines
