"""Which shared-memory bytes a kernel-IR statement touches: the one list of them.

`shared_accesses(stmt)` gives the accesses one statement makes itself (not those of the
statements in its bodies), reads first, then its write, as the hardware orders them:

    load       every shared kir.Load in the statement's own expressions (a Store's index
               and value, an IfThenElse's condition, a ForLoop's extent, ...), with the
               Select / && / || conditions a lane must satisfy for it to execute
    store      a kir.Store into a shared buffer: width elements per thread
    ldmatrix   a kir.LdMatrix: the first LDMATRIX.address_lanes(num) lanes of each warp
               read one row of LDMATRIX.row_bytes at their address
    stmatrix   a kir.StMatrix: likewise STMATRIX's first lanes write one row each
    cp.async   a kir.CpAsync: an async write of nbytes per thread, pending until the wait
               that retires its group (docs/hazards.md)

The static hazard analysis (lowering.verify.hazards), the bank-conflict report
(lowering.verify.bank_conflicts) and the interpreter's race detector (codegen.interp) read
accesses from here; an instruction's own access is the generic-proxy shared access its
statement's effects declare (lowering.kir.effects), whose per-lane shapes come from the
instruction descriptors (fuserir.instructions).
"""

from dataclasses import dataclass, field

from .. import kir


@dataclass(frozen=True, eq=False)
class SharedAccess:
    """One shared-memory access of a statement, per executing lane: `nbytes` from element
    `index` of `buffer` (for ldmatrix and stmatrix, the row address; only the first
    `lanes` lanes of a warp take part: None = every executing lane)."""

    stmt: object
    via: str                 # "load", "store", "ldmatrix", "stmatrix" or "cp.async"
    buffer: object
    index: object
    nbytes: int
    is_write: bool
    pending: bool = False    # an async write, pending until its wait
    conds: list = field(default_factory=list)   # [(cond, taken)] inside the statement
    load: object = None      # the kir.Load of a "load"
    matrices: int = 0        # ldmatrix's (stmatrix's) num
    lanes: int = None

    @property
    def info(self):
        """The kir.AccessInfo lowering attached (which thread, stage, ...), or None."""
        return self.load.access if self.load is not None else self.stmt.access


def loads_with_conditions(expr, conds=()):
    """(Load, [(cond, taken)]) for every Load in expr, in evaluation order, with the
    Select / && / || conditions a lane must satisfy for that Load to execute."""
    stack = [(expr, list(conds))]
    while stack:
        e, c = stack.pop()
        if isinstance(e, kir.Load):
            yield e, c
            stack.append((e.index, c))
        elif isinstance(e, kir.Select):
            stack += [(e.b, c + [(e.cond, False)]), (e.a, c + [(e.cond, True)]), (e.cond, c)]
        elif isinstance(e, kir.BinOp) and e.op in ("and", "or"):
            stack += [(e.b, c + [(e.a, e.op == "and")]), (e.a, c)]
        else:
            stack += [(ch, c) for ch in reversed(e.children())]


def _shared(buffer):
    return buffer is not None and buffer.memory is kir.Memory.shared


def instruction_access(stmt):
    """The generic-proxy shared-memory access the statement's own instruction makes, as
    its effects declare it (a store, ldmatrix or stmatrix rows, a cp.async write), without
    the loads of its expressions; None where it makes none. What the interpreter asks as
    each instruction runs."""
    own = kir.effects.generic_shared(stmt.effects())
    if not own:
        return None
    (a,) = own
    return SharedAccess(stmt, a.via, a.buffer, a.index, a.nbytes, a.write,
                        pending=a.until is not None, matrices=a.matrices, lanes=a.lanes)


def shared_accesses(stmt):
    """The shared-memory accesses `stmt` makes itself: reads, then its instruction's."""
    found = [SharedAccess(stmt, "load", load.buffer, load.index,
                          load.width * load.buffer.dtype.itemsize, False, conds=conds,
                          load=load)
             for e in kir.expressions(stmt) for load, conds in loads_with_conditions(e)
             if _shared(load.buffer)]
    own = instruction_access(stmt)
    return found if own is None else found + [own]


def register_accesses(stmt):
    """The registers (local buffers) a statement reads or writes itself, complete at
    issue: its generic writes (kir.effects.register_writes) and the local loads of its own
    expressions. A wgmma that uses one of them (its accumulator, register A) needs a
    wgmma.fence after the access: the PTX ISA asks for one between any register access of
    a thread and a wgmma accessing the same registers (a persistent kernel's epilogue
    reads the accumulator that the next tile's first wgmma overwrites)."""
    found = [a.buffer for a in kir.effects.register_writes(stmt.effects())]
    found += [x.buffer for e in kir.expressions(stmt) for x in kir.walk_expr(e)
              if isinstance(x, kir.Load) and x.buffer.memory is kir.Memory.local]
    return list(dict.fromkeys(found))
