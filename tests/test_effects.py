"""Statements state their effects (lowering.kir.effects): each statement of the kernels the
schedulers and the probes make declares what it accesses, which group it joins or retires,
its mbarrier operation, what it orders; and the checkers' questions, asked of those
records, give the answers the hand-kept class lists of the checkers gave before."""

import pytest

import codegen
import fuserir
import hopper_probes as hp
from fuserir import instructions as ins
from fuserir.dtypes import DataType
from lowering import kir
from lowering.kir import effects as fx

SEED = (__import__("pathlib").Path(__file__).resolve().parents[1] / "examples"
        / "seed_matmul.fz")

# What the checkers listed by class before the statements declared their effects: the
# answers the predicates must still give, class by class.
WAS_ASYNC_PROTOCOL = {"Wgmma", "TmaLoad", "TmaStore", "MbarrierInit", "MbarrierArrive",
                      "MbarrierWait"}
WAS_SYNCHRONIZING = {"Barrier", "NamedBarrier", "FenceProxyAsync", "FenceMbarrierInit",
                     "MbarrierInit", "MbarrierArrive", "MbarrierWait", "TmaLoad", "TmaStore",
                     "BulkCommit", "BulkWait", "Wgmma", "WgmmaFence", "WgmmaCommit",
                     "WgmmaWait", "CpAsync", "CpAsyncCommit", "CpAsyncWait", "ExprStmt"}
WAS_PHASE_STATE = {"MbarrierInit", "MbarrierArrive", "MbarrierWait", "TmaLoad", "TmaStore",
                   "BulkCommit", "BulkWait", "Wgmma", "WgmmaCommit", "WgmmaWait"}
WAS_INTERLEAVED = {"MbarrierInit", "MbarrierArrive", "MbarrierWait", "NamedBarrier",
                   "TmaLoad"}


def statements():
    """One statement of every class the schedulers and the probes emit, by class name."""
    kernels = [codegen.compile(fuserir.parse(SEED.read_text()), backend="interp")
               .kernels[0].kir,
               hp.tma_load_probe(40, 96, (64, 8), "128B"),
               hp.tma_store_probe(64, 64, (64, 8), "128B"),
               hp.wgmma_probe(64)[0], hp.wgmma_probe(64, register_a=True)[0],
               hp.roles_probe()]
    found = {}
    for k in kernels:
        for s in kir.walk(k.body):
            found.setdefault(type(s).__name__, s)
    zero = kir.Const(0, DataType.i32)
    tile = kir.Buffer("tile", DataType.f16, kir.Memory.shared, kir.Const(1024, DataType.i32))
    regs = kir.Buffer("regs", DataType.f16, kir.Memory.local, kir.Const(8, DataType.i32))
    found["StMatrix"] = kir.StMatrix(tile, zero, regs, zero)
    return found


STATEMENTS = statements()


def test_the_kernels_cover_the_instruction_statements():
    assert {"Store", "Barrier", "LdMatrix", "Mma", "CpAsync", "CpAsyncCommit", "CpAsyncWait",
            "Wgmma", "WgmmaFence", "WgmmaCommit", "WgmmaWait", "TmaLoad", "TmaStore",
            "BulkCommit", "BulkWait", "MbarrierInit", "FenceMbarrierInit", "MbarrierArrive",
            "MbarrierWait", "FenceProxyAsync", "NamedBarrier", "SetMaxNReg",
            "StMatrix"} <= set(STATEMENTS)


@pytest.mark.parametrize("question, was", [
    (fx.joins_async_protocol, WAS_ASYNC_PROTOCOL), (fx.synchronizes, WAS_SYNCHRONIZING),
    (fx.carries_phase_state, WAS_PHASE_STATE), (fx.orders_beyond_barriers, WAS_INTERLEAVED)])
def test_each_question_gives_what_the_class_lists_gave(question, was):
    got = {name for name, s in STATEMENTS.items() if question(s.effects())}
    assert got == was & set(STATEMENTS)


def test_a_cp_async_is_a_generic_write_pending_until_its_group_retires():
    e = STATEMENTS["CpAsync"].effects()
    (write,) = fx.generic_shared(e)
    assert write.write and write.until == fx.Group("cp.async") and write.via == "cp.async"
    assert e.group == fx.GroupOp("cp.async", "join") and e.instruction.arch == 80
    assert STATEMENTS["CpAsyncWait"].effects().group.op == "wait"


def test_a_tma_load_writes_its_box_through_the_async_proxy_until_its_mbarrier_phase():
    s = STATEMENTS["TmaLoad"]
    (box,) = fx.async_shared(s.effects())
    assert (box.buffer, box.nbytes, box.write, box.via) == (s.dst, s.map.box_bytes, True,
                                                           "tma-load")
    assert box.until == fx.Phase(s.bar, s.bar_index)
    assert s.effects().mbarrier.op == "complete_tx" and not fx.generic_shared(s.effects())


def test_a_tma_store_reads_until_a_bulk_wait_read_retires_its_group():
    (src,) = fx.async_shared(STATEMENTS["TmaStore"].effects())
    assert not src.write and src.until == fx.Group("bulk", "read")
    assert STATEMENTS["BulkWait"].effects().group.kind == "bulk"


def test_a_wgmma_uses_its_registers_and_operands_until_its_group_retires():
    s = STATEMENTS["Wgmma"]
    e = s.effects()
    assert e.collective == "warpgroup" and e.instruction.arch_specific
    assert {a.buffer for a in fx.async_register_uses(e)} >= {s.d}
    assert all(a.proxy == "async" and a.layout is not None for a in fx.async_shared(e))
    assert not fx.register_writes(e)                   # its accumulator writes are async


def test_barriers_fences_and_waits_say_what_they_order():
    assert STATEMENTS["Barrier"].effects().order == fx.Order("barrier", "block",
                                                            blocking=True)
    named = STATEMENTS["NamedBarrier"]
    assert named.effects().order.scope == "named" and named.effects().order.id == named.id
    assert STATEMENTS["FenceProxyAsync"].effects().order.orders == "proxy"
    assert STATEMENTS["WgmmaFence"].effects().order.orders == "registers"
    assert STATEMENTS["MbarrierWait"].effects().order.blocking


def test_a_statement_not_lowered_yet_is_opaque():
    stmt = kir.ExprStmt(tv=None)
    assert stmt.effects().opaque and fx.synchronizes(stmt.effects())


def test_each_instruction_statement_names_the_descriptor_whose_arch_it_needs():
    declared = {name: s.effects().instruction for name, s in STATEMENTS.items()}
    assert {n: d for n, d in declared.items() if d is not None} == {
        "Mma": ins.MMA_M16N8K16, "LdMatrix": ins.LDMATRIX, "CpAsync": ins.CP_ASYNC,
        "CpAsyncCommit": ins.CP_ASYNC, "CpAsyncWait": ins.CP_ASYNC,
        "Wgmma": ins.WGMMA, "WgmmaFence": ins.WGMMA, "WgmmaCommit": ins.WGMMA,
        "WgmmaWait": ins.WGMMA, "StMatrix": ins.STMATRIX, "TmaLoad": ins.TMA,
        "TmaStore": ins.TMA, "BulkCommit": ins.TMA, "BulkWait": ins.TMA,
        "MbarrierInit": ins.MBARRIER, "FenceMbarrierInit": ins.MBARRIER,
        "MbarrierArrive": ins.MBARRIER, "MbarrierWait": ins.MBARRIER,
        "FenceProxyAsync": ins.PROXY_FENCE, "NamedBarrier": ins.NAMED_BARRIER,
        "SetMaxNReg": ins.SETMAXNREG}
    # the arch-specific ones are sm_90a's: wgmma and setmaxnreg
    assert {n for n, d in declared.items() if d is not None and d.arch_specific} == {
        "Wgmma", "WgmmaFence", "WgmmaCommit", "WgmmaWait", "SetMaxNReg"}


def test_stmatrix_writes_rows_from_the_first_lanes_through_the_generic_proxy():
    s = STATEMENTS["StMatrix"]
    (rows,) = fx.generic_shared(s.effects())
    assert (rows.buffer, rows.write, rows.via, rows.lanes, rows.matrices) == (
        s.dst, True, "stmatrix", ins.STMATRIX.address_lanes(4), 4)
    assert s.effects().collective == "warp" and not fx.synchronizes(s.effects())
