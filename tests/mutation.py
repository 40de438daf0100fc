"""The mutation test of the checkers (tests/test_mutation_sm80.py, test_mutation_hopper.py):
mutants of a kernel's synchronization, one change each; the harmless ones, each with its
argument (docs/hazards.md lists them); and the run that holds every other mutant to being
refused by the static verifier and caught by the interpreter.

The operators, over the statements whose effects synchronize (a barrier, fence, release
or acquire; a group commit or wait; an mbarrier init, arrive or wait):
    delete      the statement taken out
    wait-down   a statement the thread waits at, swapped with the statement after it
    fence-up    a fence swapped with the statement before it
    parity      an mbarrier wait's parity flipped
    count       an mbarrier's arrival count +1 and -1
    expect-tx   an arrive's transaction bytes +16 and -16
    wait-group  a wgmma wait retiring one group fewer (its count + 1)
Each mutant is a fresh deep copy of the kernel, relabelled; `name` says what changed
where ("delete S42 sem_wait ...").

`missed(fusion, ...)` runs the interpreter on each mutant at split-K 1, 2 and 5 with as
many K tiles per split as the pipeline has stages (the size where a missed stage hand-off
is invisible to a single order), then at 2 x stages + 1 tiles per split (every stage
reused), under both role orders and one seeded random interleaving (and, for a
co-resident kernel with several splits, with the latest ready block resumed first); it
catches a mutant with a hazard, a refusal to run, or an output that differs from the
unmutated kernel's on the same integer inputs. The score goes to the session summary (fuserir statistics).
"""

import copy
from dataclasses import dataclass

import numpy as np

import codegen
from codegen.errors import HazardError, RaceError
from codegen.interp import InterpError, run_kernel
from conftest import STATS
from lowering import kir
from lowering.passes.verify_hazards import verify


@dataclass
class Mutant:
    name: str                 # what changed where: "delete S42 sem_wait ..."
    kernel: object
    operator: str             # "delete", "wait-down", ... (the module header's)
    label: str                # the changed statement's label in the original kernel


def synchronizes(stmt):
    e = stmt.effects()
    return (e.order is not None or (e.group is not None and e.group.op != "join")
            or (e.mbarrier is not None and e.mbarrier.op != "complete_tx"))


def _waits(stmt):
    e = stmt.effects()
    return ((e.order is not None and e.order.blocking)
            or (e.group is not None and e.group.op == "wait")
            or (e.mbarrier is not None and e.mbarrier.op == "wait")
            or (e.order is not None and e.order.kind == "barrier"))


def _is_fence(stmt):
    order = stmt.effects().order
    return order is not None and order.kind == "fence"


def _sites(kernel):
    """(statement list, index) of every statement, in program order."""
    out = []

    def visit(stmts):
        for i, s in enumerate(stmts):
            out.append((stmts, i))
            for body in s.bodies():
                visit(body)

    visit(kernel.body)
    return out


def mutants(kernel):
    """Every mutant of `kernel` (see the module header)."""
    out = []
    for n, (stmts, i) in enumerate(_sites(kernel)):
        stmt = stmts[i]
        if not synchronizes(stmt):
            continue

        def make(operator, change, detail=""):
            name = f"{operator}{detail} {stmt.label} {stmt.line()[:60]}"
            out.append(_make(kernel, n, name, change, operator, stmt.label))

        make("delete", lambda ss, j: ss.pop(j))
        if _waits(stmt) and i + 1 < len(stmts):
            make("wait-down", _swap_next)
        if _is_fence(stmt) and i > 0:
            make("fence-up", _swap_previous)
        if isinstance(stmt, kir.MbarrierWait):
            make("parity", _field(
                "parity", lambda p: kir.BinOp("xor", p, kir.Const(1, p.dtype), p.dtype)))
        if isinstance(stmt, kir.MbarrierInit):
            for d in (1, -1):
                make("count", _field("count", lambda c, d=d: kir.BinOp(
                    "add", c, kir.Const(d, c.dtype), c.dtype)), f" {d:+d}")
        if isinstance(stmt, kir.MbarrierArrive) and stmt.tx_bytes is not None:
            for d in (16, -16):
                make("expect-tx", _field("tx_bytes", lambda b, d=d: kir.BinOp(
                    "add", b, kir.Const(d, b.dtype), b.dtype)), f" {d:+d}")
        if isinstance(stmt, kir.WgmmaWait):
            make("wait-group", _field("n", lambda k: k + 1), " +1")
    return out


def _swap_next(stmts, j):
    stmts[j], stmts[j + 1] = stmts[j + 1], stmts[j]


def _swap_previous(stmts, j):
    stmts[j - 1], stmts[j] = stmts[j], stmts[j - 1]


def _field(name, change):
    def apply(stmts, j):
        setattr(stmts[j], name, change(getattr(stmts[j], name)))
    return apply


def _make(kernel, site, name, change, operator, label):
    mutated = copy.deepcopy(kernel)
    stmts, j = _sites(mutated)[site]
    change(stmts, j)
    kir.relabel(mutated.body)
    return Mutant(name, mutated, operator, label)


# -- the harmless mutants, each with its argument --------------------------------------------

def _empty_group_commit(kernel, stmt, rest):
    """A cp.async.commit_group right before the drain's wait_group 0, with no cp.async
    after the kernel's previous commit: it closes an empty group (the main loop commits
    each stage's copies), so the drain retires the same copies without it."""
    if not stmt.line().startswith("cp.async.commit_group") or not rest or \
            not rest[0].line().startswith("cp.async.wait_group 0"):
        return False
    before = []
    for s in kir.walk(kernel.body):
        if s is stmt:
            break
        before.append(s)
    last_commit = max(i for i, s in enumerate(before)
                      if s.line().startswith("cp.async.commit_group"))
    return not any(kir.effects.joins_group(s.effects(), "cp.async")
                   for s in before[last_commit + 1:])


def _mbarrier_init_fence_without_async_arrivals(kernel, stmt, rest):
    """fence.mbarrier_init orders the inits before the async proxy's operations on the
    barriers (a TMA or bulk load completing bytes on one) and before threads of other CTAs
    of a cluster; in a kernel with neither (the producer-copies path: generic stores and
    mbarrier.arrive by the CTA's own threads), the __syncthreads after the inits orders
    them before every use, so the fence is redundant."""
    order = stmt.effects().order
    if order is None or order.orders != "mbarrier-init":
        return False
    return not any(s.effects().mbarrier is not None
                   and s.effects().mbarrier.op == "complete_tx" for s in kir.walk(kernel.body))


def _mbarrier_wait_beside_wgmma_fence(kernel, stmt, rest):
    """An mbarrier wait and a wgmma.fence swapped (a persistent kernel's consumers zero
    the accumulator, wait for the stage, fence, issue the wgmmas): the fence orders the
    thread's writes of the accumulator's registers before the wgmmas, the wait the
    stage's TMA bytes; they order different things, and either order leaves both before
    the wgmmas that follow."""
    pair = [stmt] + rest[:1]
    if len(pair) < 2:
        return False
    kinds = {type(s).__name__ for s in pair}
    return kinds == {"MbarrierWait", "WgmmaFence"}


def _fence_after_mbarrier_wait(kernel, stmt, rest):
    """The same pair seen from the fence moved above the wait."""
    for stmts, i, s in _statements(kernel):
        if s is stmt:
            return i > 0 and _mbarrier_wait_beside_wgmma_fence(kernel, stmts[i - 1], [stmt])
    return False


def _barrier_above_register_work(kernel, stmt, rest):
    """A barrier moved below a statement that only reads and writes the thread's own
    registers (a staged epilogue's copy of the accumulator, before the staging buffer's
    writes): a barrier orders the threads' memory accesses and that statement makes none,
    so either order leaves the same accesses on each side of the barrier."""
    order = stmt.effects().order
    if order is None or order.kind != "barrier" or not rest:
        return False
    moved = list(kir.walk(rest[:1]))
    own = all(a.buffer.memory is kir.Memory.local for x in moved for a in x.effects().accesses)
    loads = all(e.buffer.memory is kir.Memory.local for x in moved for root in kir.expressions(x)
                for e in kir.walk_expr(root) if isinstance(e, kir.Load))
    return own and loads and not any(kir.effects.synchronizes(x.effects()) for x in moved)


HARMLESS = [("delete", _empty_group_commit),
            ("wait-down", _barrier_above_register_work),
            ("wait-down", _mbarrier_wait_beside_wgmma_fence),
            ("fence-up", _fence_after_mbarrier_wait),
            ("delete", _mbarrier_init_fence_without_async_arrivals),
            ("fence-up", _mbarrier_init_fence_without_async_arrivals)]


def harmless(kernel, mutant):
    """The argument (a docstring) that `mutant` of `kernel` is harmless, or None."""
    for stmts, i, stmt in _statements(kernel):
        if stmt.label == mutant.label:
            for operator, rule in HARMLESS:
                if operator == mutant.operator and rule(kernel, stmt, stmts[i + 1:]):
                    return rule.__doc__
            return None
    raise AssertionError(mutant.name)


def _statements(kernel):
    out = []

    def visit(stmts):
        for i, s in enumerate(stmts):
            out.append((stmts, i, s))
            for body in s.bodies():
                visit(body)

    visit(kernel.body)
    return out


# -- running a kernel --------------------------------------------------------------------

def arguments(kernel, sizes, seed=0):
    rng = np.random.default_rng(seed)
    names = {p.var.name for p in kernel.scalar_params}
    args = {k: v for k, v in sizes.items() if k in names}
    for p in kernel.tensor_params:
        shape = tuple(int(kir.evaluate_scalar(s, sizes)) for s in p.sizes)
        dtype = p.buffer.dtype.numpy
        args[p.buffer.name] = (np.zeros(shape, dtype) if p.is_output
                               else rng.integers(-3, 4, shape).astype(dtype))
    return args


def outputs(kernel, args):
    return {p.buffer.name: args[p.buffer.name] for p in kernel.tensor_params if p.is_output}


def interpreter_catches(kernel, sizes_list, clean):
    """How the interpreter shows the mutant (a hazard, a refusal, a wrong output), or
    None where it runs clean at every size and interleaving."""
    # a co-resident kernel's blocks wait on later ones: also resume the latest ready block
    # (where a tile has several)
    runs = [(how, "earliest") for how in ("then-first", "else-first", 0)]
    for n, sizes in enumerate(sizes_list):
        latest = kernel.co_resident and sizes.get("splitk", 1) > 1
        for how, order in runs + ([("then-first", "latest")] if latest else []):
            args = arguments(kernel, sizes)
            try:
                run_kernel(kernel, args, interleaving=how, block_order=order)
            except RaceError as e:
                return f"{sorted({h.kind for h in e.hazards})} at {sizes} ({how}, {order})"
            except InterpError as e:
                return f"refused to run: {e}"
            got = outputs(kernel, args)
            if any(not np.array_equal(got[k], clean[n][k]) for k in got):
                return f"a wrong output at {sizes} ({how}, {order})"
    return None


def sizes_for(k_stages, k_tile, m, scalars=None):
    """Split-K 1, 2 and 5 at K tiles per split = stages, then 1 and 2 at 2 x stages + 1
    (each with `scalars`, the kernel's other run-time scalars, where given)."""
    return ([{"M": m, "N": 128, "K": k_stages * s, "splitk": s, **(scalars or {})}
             for s in (1, 2, 5)]
            + [{"M": m, "N": 128, "K": (2 * k_stages + k_tile) * s, "splitk": s,
                **(scalars or {})} for s in (1, 2)])


def missed(fusion, k_stages, k_tile, m, scalars=None):
    """The mutants of `fusion`'s kernels (compiled for unknown sizes, as the heuristics
    build them) that the verifier does not refuse or the interpreter does not catch and
    that no harmless rule argues for; `k_stages`: K per split at K tiles = stages,
    `k_tile`: K of one tile, `m`: the M of the runs (one CTA tile, or several of a
    persistent kernel's), `scalars`: other run-time scalars of the runs."""
    sizes_list = sizes_for(k_stages, k_tile, m, scalars)
    out = []
    for kernel in (k.kir for k in codegen.compile(fusion, backend="interp").kernels):
        clean = clean_outputs(kernel, sizes_list)
        for mutant in mutants(kernel):
            v = judge(kernel, mutant, sizes_list, clean)
            STATS["mutation test: mutants"] += 1
            STATS["mutation test: refused by the verifier"] += v.refused is not None
            STATS["mutation test: caught by the interpreter"] += v.caught is not None
            STATS["mutation test: harmless (argued)"] += v.harmless
            if v.missed:
                out.append(v.missed)
    return out


def clean_outputs(kernel, sizes_list):
    """The unmutated kernel's outputs at each of the sizes."""
    clean = []
    for sizes in sizes_list:
        args = arguments(kernel, sizes)
        run_kernel(kernel, args)
        clean.append({k: v.copy() for k, v in outputs(kernel, args).items()})
    return clean


@dataclass
class Verdict:
    refused: list             # the verifier's hazard kinds, or None
    caught: str               # how the interpreter showed it, or None
    harmless: bool            # neither, and a rule argues it harmless
    missed: str               # else what went wrong, in words (None when all is well)


def judge(kernel, mutant, sizes_list, clean):
    """What the verifier and the interpreter make of `mutant` of `kernel`."""
    try:
        verify(mutant.kernel)
        refused = None
    except HazardError as e:
        refused = sorted({h.kind for h in e.hazards})
    caught = interpreter_catches(mutant.kernel, sizes_list, clean)
    argued = refused is None and caught is None and harmless(kernel, mutant) is not None
    ok = argued or (refused is not None and caught is not None)
    report = None if ok else (f"{kernel.name}: {mutant.name}: verifier {refused}, "
                              f"interpreter {caught}")
    return Verdict(refused, caught, argued, report)
