"""Hand-built kernel IR kernels, for tests of the backends (CUDA emission, NVRTC, launch,
the interpreter). Each builder returns a fresh kir.Kernel, labelled S1, S2, ... in program
order. Shapes are symbolic (ScalarParams M, N) unless said otherwise; every tensor has one
stride Var per axis, named <tensor>_s<axis>.

    pointwise_kernel()        y[M, N] = x * 2 + 1 (f32), 2-D grid of 32x8 blocks, bounds
                              predicate on both axes
    shared_reverse_kernel()   y[N] = x reversed within each 128-element block, staged
                              through a shared buffer, one Barrier (RAW) between the write
                              and the read (pad_bytes places the buffer; > 48 KB total
                              exercises the opt-in launch path)
    half_kernel()             f16 / bf16 loads, casts through f32, f16 / bf16 / f32 stores
    local_reduction_kernel()  y[M] = row sums of x[M, N]: a local f32[4] accumulator,
                              an unrolled init, a serial loop over ceildiv(N, 4)
    warp_sum_kernel()         y[M] = row sums of x[M, 32]: a warp per row, ShuffleXor tree
    all_ops_kernel()          every op of UNARY_OPS / BINARY_OPS on every dtype it takes;
                              .cases lists (output, op, dtype, operand inputs)
    casts_kernel()            every (src, dst) dtype pair; .cases lists (output, src, dst)
"""

from fuserir import op_table
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F32, F64 = DataType.i32, DataType.i64, DataType.f32, DataType.f64
F16, BF16, BOOL = DataType.f16, DataType.bf16, DataType.bool
ALL_DTYPES = (F16, BF16, F32, F64, I32, I64, BOOL)


# -- small constructors ----------------------------------------------------------------------

def const(value, dtype=I32):
    return kir.Const(value, dtype)


def binop(op, a, b):
    """`a op b`; a plain int operand becomes a constant of the other operand's type."""
    if not isinstance(a, kir.ScalarExpr):
        a = const(a, b.dtype if isinstance(b, kir.ScalarExpr) else I32)
    if not isinstance(b, kir.ScalarExpr):
        b = const(b, a.dtype)
    return kir.BinOp(op, a, b, op_table.result_type(op_table.BINARY[op], a.dtype))


def add(a, b): return binop("add", a, b)
def sub(a, b): return binop("sub", a, b)
def mul(a, b): return binop("mul", a, b)
def lt(a, b): return binop("lt", a, b)
def land(a, b): return binop("and", a, b)


def tid(axis="x", dtype=I32):
    return kir.Special(kir.SpecialKind.threadIdx, axis, dtype)


def bid(axis="x", dtype=I32):
    return kir.Special(kir.SpecialKind.blockIdx, axis, dtype)


def scalar(name, dtype=I32):
    return kir.ScalarParam(kir.Var(name, dtype))


def tensor(name, dtype, sizes, is_output=False, index_dtype=I32):
    """A global TensorParam with strides <name>_s0, <name>_s1, ..."""
    buf = kir.Buffer(name, dtype, kir.Memory.global_)
    strides = [kir.Var(f"{name}_s{i}", index_dtype) for i in range(len(sizes))]
    return kir.TensorParam(buf, list(sizes), strides, is_output)


def offset(param, indices):
    """sum(index_i * stride_i): the element offset of `indices` in a TensorParam."""
    terms = [mul(i, s) for i, s in zip(indices, param.strides)]
    out = terms[0]
    for t in terms[1:]:
        out = add(out, t)
    return out


def load(param, indices):
    return kir.Load(param.buffer, offset(param, indices))


def store(param, indices, value):
    return kir.Store(param.buffer, offset(param, indices), value)


def launch(grid, block):
    pad = lambda t: tuple(t) + (const(1),) * (3 - len(t))  # noqa: E731
    return kir.LaunchConfig(pad(grid), pad(block))


def finish(kernel):
    kir.relabel(kernel.body)
    return kernel


def ceildiv(a, b):
    return binop("ceildiv", a, b)


# -- the kernels -----------------------------------------------------------------------------

def pointwise_kernel(index_dtype=I32, name="pointwise"):
    """y[M, N] = x * 2 + 1 over f32, blocks of 32 x 8 threads, predicated on i < M, j < N."""
    t = index_dtype
    M, N = scalar("M", t), scalar("N", t)
    x = tensor("x", F32, [M.var, N.var], index_dtype=t)
    y = tensor("y", F32, [M.var, N.var], is_output=True, index_dtype=t)
    i = add(mul(bid("y", t), const(8, t)), tid("y", t))
    j = add(mul(bid("x", t), const(32, t)), tid("x", t))
    value = add(mul(load(x, [i, j]), const(2.0, F32)), const(1.0, F32))
    body = [
        kir.Comment("y = x * 2 + 1: thread (i, j) computes element [i, j]"),
        kir.IfThenElse(land(lt(i, M.var), lt(j, N.var)), [store(y, [i, j], value)]),
    ]
    cfg = launch([ceildiv(N.var, const(32, t)), ceildiv(M.var, const(8, t))],
                 [const(32, t), const(8, t)])
    return finish(kir.Kernel(name, [x, y], [M, N], body, cfg, t))


def shared_reverse_kernel(pad_bytes=0, block=128, name="shared_reverse"):
    """y[g] = x[b * block + (block - 1 - t)] for g = b * block + t, staged through shared xs
    (placed at byte pad_bytes of the pool); one barrier orders the write and the read."""
    N = scalar("N")
    x = tensor("x", F32, [N.var])
    y = tensor("y", F32, [N.var], is_output=True)
    xs = kir.Buffer("xs", F32, kir.Memory.shared, size=const(block),
                    byte_offset=const(pad_bytes), tensor="xs")
    base = mul(bid(), const(block))
    g = add(base, tid())
    mirror = sub(const(block - 1), tid())
    write = kir.Store(xs, tid(), load(x, [g]),
                      access=kir.AccessInfo("xs", (("TIDx", "xs.0"),)))
    read = kir.Load(xs, mirror, access=kir.AccessInfo("xs", (("TIDx", None),)))
    out = store(y, [g], read)
    guard_read = kir.IfThenElse(land(lt(g, N.var), lt(add(base, mirror), N.var)), [out])
    barrier = kir.Barrier("sync1")
    body = [
        kir.Allocate(xs),
        kir.IfThenElse(lt(g, N.var), [write]),
        barrier,
        guard_read,
    ]
    kernel = finish(kir.Kernel(name, [x, y], [N], body,
                               launch([ceildiv(N.var, const(block))], [const(block)])))
    barrier.reasons.append(kir.SyncReason(kir.HazardKind.RAW, ("xs",), write, out))
    return kernel


def half_kernel(name="halfs"):
    """c = f16(f32(a) * f32(b) + 1), d = bf16(f32(a) - f32(b)), e = f32(a) + f32(b),
    f = bf16(a) (direct f16 -> bf16), g = f16(0.5) constant, over [N] with a: f16, b: bf16."""
    N = scalar("N")
    a = tensor("a", F16, [N.var])
    b = tensor("b", BF16, [N.var])
    outs = {n: tensor(n, dt, [N.var], is_output=True)
            for n, dt in (("c", F16), ("d", BF16), ("e", F32), ("f", BF16), ("g", F16))}
    g = add(mul(bid(), const(128)), tid())
    af, bf = kir.Cast(load(a, [g]), F32), kir.Cast(load(b, [g]), F32)
    body = [kir.IfThenElse(lt(g, N.var), [
        store(outs["c"], [g], kir.Cast(add(mul(af, bf), const(1.0, F32)), F16)),
        store(outs["d"], [g], kir.Cast(sub(af, bf), BF16)),
        store(outs["e"], [g], add(af, bf)),
        store(outs["f"], [g], kir.Cast(load(a, [g]), BF16)),
        store(outs["g"], [g], const(0.5, F16)),
    ])]
    return finish(kir.Kernel(name, [a, b] + list(outs.values()), [N], body,
                             launch([ceildiv(N.var, const(128))], [const(128)])))


def local_reduction_kernel(name="row_sum"):
    """y[m] = sum_n x[m, n]: one thread per row, four partial sums in a local buffer."""
    M, N = scalar("M"), scalar("N")
    x = tensor("x", F32, [M.var, N.var])
    y = tensor("y", F32, [M.var], is_output=True)
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=const(4))
    row = add(mul(bid(), const(64)), tid())
    u, k, u2 = kir.Var("u", I32), kir.Var("k", I32), kir.Var("u2", I32)
    col = add(mul(k, const(4)), u2)
    part = lambda n: kir.Load(acc, const(n))  # noqa: E731
    body = [
        kir.Allocate(acc),
        kir.ForLoop(u, const(4), [kir.Store(acc, u, const(0.0, F32))], kind="unroll"),
        kir.IfThenElse(lt(row, M.var), [
            kir.ForLoop(k, ceildiv(N.var, const(4)), [
                kir.ForLoop(u2, const(4), [
                    kir.IfThenElse(lt(col, N.var), [
                        kir.Store(acc, u2, add(kir.Load(acc, u2), load(x, [row, col]))),
                    ]),
                ], kind="unroll"),
            ]),
            store(y, [row], add(add(part(0), part(1)), add(part(2), part(3)))),
        ]),
    ]
    return finish(kir.Kernel(name, [x, y], [M, N], body,
                             launch([ceildiv(M.var, const(64))], [const(64)])))


def warp_sum_kernel(name="warp_sum"):
    """y[m] = sum of x[m, 0:32]: block m is one warp; a ShuffleXor butterfly."""
    M = scalar("M")
    x = tensor("x", F32, [M.var, const(32)])
    y = tensor("y", F32, [M.var], is_output=True)
    v = kir.Buffer("v", F32, kir.Memory.local, size=const(1))
    v0 = lambda: kir.Load(v, const(0))  # noqa: E731
    body = [kir.Allocate(v), kir.Store(v, const(0), load(x, [bid(), tid()]))]
    for mask in (16, 8, 4, 2, 1):
        body.append(kir.Store(v, const(0), add(v0(), kir.ShuffleXor(v0(), mask))))
    body.append(kir.IfThenElse(binop("eq", tid(), const(0)), [store(y, [bid()], v0())]))
    return finish(kir.Kernel(name, [x, y], [M], body, launch([M.var], [const(32)])))


UNARY_DTYPES = {
    "neg": (I32, I64, F32, F64), "abs": (I32, I64, F32, F64), "relu": (I32, I64, F32, F64),
    "not": (BOOL,), "bitnot": (I32, I64, BOOL),
    # every math op and predicate of the op table (exp, tanh, gelu, isnan, ...) takes f32
    # and f64
    **{op: (F32, F64) for op, entry in op_table.UNARY.items()
       if entry.kind in ("math", "predicate")},
}
BINARY_DTYPES = {
    **{op: (I32, I64, F32, F64)
       for op in ("add", "sub", "mul", "div", "mod", "remainder", "min", "max", "pow")},
    "ceildiv": (I32, I64), "shl": (I32, I64), "shr": (I32, I64),
    **{op: (I32, I64, BOOL) for op in ("bitand", "bitor", "xor")},
    "atan2": (F32, F64), "nextafter": (F32, F64),
    **{op: (I32, I64, F32, F64, BOOL) for op in ("eq", "ne")},
    **{op: (I32, I64, F32, F64) for op in ("lt", "le", "gt", "ge")},
    "and": (BOOL,), "or": (BOOL,), "logical_xor": (BOOL,),
}


def all_ops_kernel(name="all_ops"):
    """out_<op>_<dtype>[N] = op(a_<dtype>, b_<dtype>) for every op and dtype it takes.
    kernel.cases: list of (output name, op, dtype, (input names...))."""
    N = scalar("N")
    dtypes = (I32, I64, F32, F64, BOOL)
    ins = {}
    for dt in dtypes:
        for v in ("a", "b"):
            ins[f"{v}_{dt}"] = tensor(f"{v}_{dt}", dt, [N.var])
    g = add(mul(bid(), const(128)), tid())
    outs, stores, cases = [], [], []
    for op, dts in UNARY_DTYPES.items():
        for dt in dts:
            out_dt = op_table.result_type(op_table.UNARY[op], dt)
            p = tensor(f"out_{op}_{dt}", out_dt, [N.var], is_output=True)
            outs.append(p)
            stores.append(store(p, [g], kir.UnOp(op, load(ins[f"a_{dt}"], [g]), out_dt)))
            cases.append((p.buffer.name, op, dt, (f"a_{dt}",)))
    for op, dts in BINARY_DTYPES.items():
        for dt in dts:
            out_dt = op_table.result_type(op_table.BINARY[op], dt)
            p = tensor(f"out_{op}_{dt}", out_dt, [N.var], is_output=True)
            outs.append(p)
            value = binop(op, load(ins[f"a_{dt}"], [g]), load(ins[f"b_{dt}"], [g]))
            stores.append(store(p, [g], value))
            cases.append((p.buffer.name, op, dt, (f"a_{dt}", f"b_{dt}")))
    # a Select per dtype rides along
    for dt in dtypes:
        p = tensor(f"out_select_{dt}", dt, [N.var], is_output=True)
        outs.append(p)
        sel = kir.Select(load(ins["a_bool"], [g]), load(ins[f"a_{dt}"], [g]),
                         load(ins[f"b_{dt}"], [g]), dt)
        stores.append(store(p, [g], sel))
        cases.append((p.buffer.name, "select", dt, ("a_bool", f"a_{dt}", f"b_{dt}")))
    body = [kir.IfThenElse(lt(g, N.var), stores)]
    kernel = finish(kir.Kernel(name, list(ins.values()) + outs, [N], body,
                               launch([ceildiv(N.var, const(128))], [const(128)])))
    kernel.cases = cases
    return kernel


def casts_kernel(name="casts"):
    """cast_<src>_<dst>[N] = (dst) in_<src> for every pair of dtypes (src != dst).
    kernel.cases: list of (output name, src, dst)."""
    N = scalar("N")
    ins = {dt: tensor(f"in_{dt}", dt, [N.var]) for dt in ALL_DTYPES}
    g = add(mul(bid(), const(128)), tid())
    outs, stores, cases = [], [], []
    for src in ALL_DTYPES:
        for dst in ALL_DTYPES:
            if src is dst:
                continue
            p = tensor(f"cast_{src}_{dst}", dst, [N.var], is_output=True)
            outs.append(p)
            stores.append(store(p, [g], kir.Cast(load(ins[src], [g]), dst)))
            cases.append((p.buffer.name, src, dst))
    body = [kir.IfThenElse(lt(g, N.var), stores)]
    kernel = finish(kir.Kernel(name, list(ins.values()) + outs, [N], body,
                               launch([ceildiv(N.var, const(128))], [const(128)])))
    kernel.cases = cases
    return kernel


ALL_KERNELS = {
    "pointwise": pointwise_kernel,
    "pointwise_i64": lambda: pointwise_kernel(I64, name="pointwise_i64"),
    "shared_reverse": shared_reverse_kernel,
    "shared_reverse_big": lambda: shared_reverse_kernel(pad_bytes=60 * 1024,
                                                        name="shared_reverse_big"),
    "half": half_kernel,
    "local_reduction": local_reduction_kernel,
    "warp_sum": warp_sum_kernel,
    "all_ops": all_ops_kernel,
    "casts": casts_kernel,
}


# -- tensor cores and asynchronous copies (sm_80+) --------------------------------------------
#
#   ldmatrix_kernel(num, trans, dtype)  one warp: x[num*64] (num 8x8 row-major matrices) ->
#                               shared -> barrier -> ldmatrix.x{num}{.trans} -> every lane's
#                               2*num halves to y[32, 2*num] (y[l, 2i + h]: half h of reg i)
#   mma_kernel(dtype)           one warp: A[16, 16], B[16, 8] (k x n), C[16, 8] f32 loaded
#                               into fragments by the documented layouts (plain Stores),
#                               mma.m16n8k16, D stored by the layout to d[16, 8] and every
#                               lane's 4 floats to regs[32, 4]
#   ldmatrix_mma_kernel(dtype)  one warp: A and B staged in shared, fragments by ldmatrix
#                               (A: x4, B: x2.trans), mma into a zeroed accumulator,
#                               fragment indices from a loop variable; d[16, 8] = A @ B
#   cp_async_kernel()           one block of 32: x[320] f32 -> shared by cp.async in three
#                               groups (16-byte .cg with src-size 16/8/0, 4-byte .ca with
#                               src-size 4/0, 8-byte .ca with src-size 8/0), commit after
#                               each, wait_group 2, 1, 0, barrier, shared -> y[320];
#                               .expected(x) is y in numpy
# TENSORCORE_KERNELS names builders of every variant (all compile with NVRTC).


def _lane_gt(name="l"):
    """(lane, g, t) expressions for a one-warp block: l = threadIdx.x, g = l / 4, t = l % 4."""
    lane = tid()
    return lane, binop("div", lane, const(4)), binop("mod", lane, const(4))


def ldmatrix_kernel(num=4, trans=False, dtype=F16, name=None):
    name = name or f"ldmatrix_x{num}{'_trans' if trans else ''}_{dtype}"
    n = num * 64
    x = tensor("x", dtype, [const(n)])
    y = tensor("y", dtype, [const(32), const(2 * num)], is_output=True)
    ts = kir.Buffer("ts", dtype, kir.Memory.shared, size=const(n), byte_offset=const(0),
                    tensor="ts")
    frag = kir.Buffer("frag", dtype, kir.Memory.local, size=const(2 * num))
    lane = tid()
    u, i = kir.Var("u", I32), kir.Var("i", I32)
    elem = add(mul(u, const(32)), lane)
    write = kir.Store(ts, elem, load(x, [elem]), access=kir.AccessInfo("ts", (("TIDx", None),)))
    # lane l supplies row l % 8 of matrix l / 8 (lanes past 8 * num: any valid row)
    matrix = binop("mod", binop("div", lane, const(8)), const(num))
    address = add(mul(matrix, const(64)), mul(binop("mod", lane, const(8)), const(8)))
    ld = kir.LdMatrix(frag, const(0), ts, address, num=num, trans=trans,
                      access=kir.AccessInfo("ts", (("TIDx", None),)))
    barrier = kir.Barrier("sync1")
    body = [
        kir.Allocate(ts), kir.Allocate(frag),
        kir.ForLoop(u, const(2 * num), [write], kind="unroll"),
        barrier,
        ld,
        kir.ForLoop(i, const(2 * num), [store(y, [lane, i], kir.Load(frag, i))],
                    kind="unroll"),
    ]
    kernel = finish(kir.Kernel(name, [x, y], [], body, launch([const(1)], [const(32)])))
    barrier.reasons.append(kir.SyncReason(kir.HazardKind.RAW, ("ts",), write, ld))
    return kernel


def ldmatrix_expected(tile, num, trans):
    """What ldmatrix_kernel stores: y[l, 2i + h] per the PTX ISA fragment figure, from
    `tile` (num*64 values: matrix i row r column c at i*64 + r*8 + c)."""
    import numpy as np
    m = np.asarray(tile).reshape(num, 8, 8)
    y = np.empty((32, 2 * num), dtype=m.dtype)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(num):
            for h in range(2):
                y[lane, 2 * i + h] = m[i, 2 * t + h, g] if trans else m[i, g, 2 * t + h]
    return y


# Fragment figures of mma.m16n8k16 as offsets: (row offset from g, column offset from 2t).
A_FRAGMENT = ((0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9))   # a0..a7
CD_FRAGMENT = ((0, 0), (0, 1), (8, 0), (8, 1))                                  # c0..c3
B_FRAGMENT = (0, 1, 8, 9)             # b0..b3: k = 2t + offset, n = g


def _gt_coords(g, t, offsets):
    """(g + dr, 2t + dc) for each offset, as ints or as kir expressions."""
    if isinstance(g, int):
        return [(g + dr, 2 * t + dc) for dr, dc in offsets]
    return [(add(g, const(dr)), add(mul(t, const(2)), const(dc))) for dr, dc in offsets]


def _a_coords(g, t):
    """(row, col) of A's 8 halves a0..a7 held by the lane (g, t) (m16n8k16, row)."""
    return _gt_coords(g, t, A_FRAGMENT)


def _b_coords(g, t):
    """(k, n) of B's 4 halves b0..b3 held by the lane (g, t)."""
    return [(k, n) for n, k in _gt_coords(g, t, [(0, dk) for dk in B_FRAGMENT])]


def _cd_coords(g, t):
    """(row, col) of the 4 floats of C/D held by the lane (g, t)."""
    return _gt_coords(g, t, CD_FRAGMENT)


def mma_kernel(dtype=F16, name=None):
    name = name or f"mma_{dtype}"
    A = tensor("A", dtype, [const(16), const(16)])
    B = tensor("B", dtype, [const(16), const(8)])
    C = tensor("C", F32, [const(16), const(8)])
    D = tensor("D", F32, [const(16), const(8)], is_output=True)
    regs = tensor("regs", F32, [const(32), const(4)], is_output=True)
    fa = kir.Buffer("fa", dtype, kir.Memory.local, size=const(8))
    fb = kir.Buffer("fb", dtype, kir.Memory.local, size=const(4))
    fc = kir.Buffer("fc", F32, kir.Memory.local, size=const(4))
    fd = kir.Buffer("fd", F32, kir.Memory.local, size=const(4))
    lane, g, t = _lane_gt()
    body = [kir.Allocate(b) for b in (fa, fb, fc, fd)]
    body += [kir.Store(fa, const(k), load(A, rc)) for k, rc in enumerate(_a_coords(g, t))]
    body += [kir.Store(fb, const(k), load(B, kn)) for k, kn in enumerate(_b_coords(g, t))]
    body += [kir.Store(fc, const(k), load(C, rc)) for k, rc in enumerate(_cd_coords(g, t))]
    body.append(kir.Mma(fd, const(0), fa, const(0), fb, const(0), fc, const(0), dtype=dtype))
    body += [store(D, rc, kir.Load(fd, const(k))) for k, rc in enumerate(_cd_coords(g, t))]
    body += [store(regs, [lane, const(k)], kir.Load(fd, const(k))) for k in range(4)]
    return finish(kir.Kernel(name, [A, B, C, D, regs], [], body,
                             launch([const(1)], [const(32)])))


def ldmatrix_mma_kernel(dtype=F16, name=None):
    name = name or f"ldmatrix_mma_{dtype}"
    A = tensor("A", dtype, [const(16), const(16)])
    B = tensor("B", dtype, [const(16), const(8)])
    D = tensor("D", F32, [const(16), const(8)], is_output=True)
    As = kir.Buffer("As", dtype, kir.Memory.shared, size=const(256), byte_offset=const(0),
                    tensor="As")
    Bs = kir.Buffer("Bs", dtype, kir.Memory.shared, size=const(128), byte_offset=const(512),
                    tensor="Bs")
    fa = kir.Buffer("fa", dtype, kir.Memory.local, size=const(8))
    fb = kir.Buffer("fb", dtype, kir.Memory.local, size=const(4))
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=const(8))
    lane, g, t = _lane_gt()
    u, j, k = kir.Var("u", I32), kir.Var("j", I32), kir.Var("k", I32)
    none = kir.AccessInfo("As", (("TIDx", None),))
    nb = kir.AccessInfo("Bs", (("TIDx", None),))
    e = add(mul(u, const(32)), lane)             # element of the flattened tile
    wa = kir.Store(As, e, load(A, [binop("div", e, const(16)), binop("mod", e, const(16))]),
                   access=none)
    wb = kir.Store(Bs, e, load(B, [binop("div", e, const(8)), binop("mod", e, const(8))]),
                   access=nb)
    # A: matrix i = lane / 8 is (rows 8 (i % 2).., cols 8 (i / 2)..), so registers come out
    # in the order a0..a3 of the mma figure. B: .trans of the two 8x8 k-blocks of B (k x n,
    # row-major), lane l < 16 supplying row k = l.
    m = binop("div", lane, const(8))
    arow = add(mul(binop("mod", m, const(2)), const(8)), binop("mod", lane, const(8)))
    a_addr = add(mul(arow, const(16)), mul(binop("div", m, const(2)), const(8)))
    b_addr = mul(binop("mod", lane, const(16)), const(8))
    acc_at = mul(j, const(4))                  # j = 0 only: a loop-variable fragment index
    lda = kir.LdMatrix(fa, const(0), As, a_addr, num=4, access=none)
    ldb = kir.LdMatrix(fb, const(0), Bs, b_addr, num=2, trans=True, access=nb)
    barrier = kir.Barrier("sync1")
    body = [
        kir.Allocate(As), kir.Allocate(Bs), kir.Allocate(fa), kir.Allocate(fb),
        kir.Allocate(acc),
        kir.ForLoop(u, const(8), [wa], kind="unroll"),
        kir.ForLoop(u, const(4), [wb], kind="unroll"),
        barrier,
        lda, ldb,
        kir.ForLoop(k, const(8), [kir.Store(acc, k, const(0.0, F32))], kind="unroll"),
        kir.ForLoop(j, const(1), [
            kir.Mma(acc, acc_at, fa, const(0), fb, const(0), acc, acc_at, dtype=dtype),
        ]),
    ]
    body += [store(D, rc, kir.Load(acc, const(n))) for n, rc in enumerate(_cd_coords(g, t))]
    kernel = finish(kir.Kernel(name, [A, B, D], [], body, launch([const(1)], [const(32)])))
    barrier.reasons += [kir.SyncReason(kir.HazardKind.RAW, ("As",), wa, lda),
                        kir.SyncReason(kir.HazardKind.RAW, ("Bs",), wb, ldb)]
    return kernel


CP_ASYNC_ELEMENTS = 320


def cp_async_kernel(name="cp_async"):
    """x[320] f32 -> shared ts -> y[320]: elements 0..127 by 16-byte .cg copies (thread t:
    4t..4t+3, src-size 0 where t % 4 == 3, 8 where t % 4 == 2, else 16), 128..255 by 4-byte
    .ca copies (thread t: 128 + t + 32 j, src-size 0 where (t + j) % 5 == 0), 256..319 by
    8-byte .ca copies (thread t: 256 + 2t, src-size 0 where t % 3 == 0)."""
    n = CP_ASYNC_ELEMENTS
    x = tensor("x", F32, [const(n)])
    y = tensor("y", F32, [const(n)], is_output=True)
    ts = kir.Buffer("ts", F32, kir.Memory.shared, size=const(n), byte_offset=const(0),
                    tensor="ts")
    lane = tid()
    u, j = kir.Var("u", I32), kir.Var("j", I32)
    mine = kir.AccessInfo("ts", (("TIDx", "ts.0"),))
    anyone = kir.AccessInfo("ts", (("TIDx", None),))
    eq = lambda a, b: binop("eq", a, b)            # noqa: E731
    mod = lambda a, b: binop("mod", a, const(b))   # noqa: E731
    size16 = kir.Select(eq(mod(lane, 4), const(3)), const(0),
                        kir.Select(eq(mod(lane, 4), const(2)), const(8), const(16), I32), I32)
    e16 = mul(lane, const(4))
    e4 = add(add(const(128), lane), mul(j, const(32)))
    size4 = kir.Select(eq(mod(add(lane, j), 5), const(0)), const(0), const(4), I32)
    e8 = add(const(256), mul(lane, const(2)))
    size8 = kir.Select(eq(mod(lane, 3), const(0)), const(0), const(8), I32)
    cp16 = kir.CpAsync(ts, e16, x.buffer, offset(x, [e16]), 16, size16, "cg", access=mine)
    cp4 = kir.CpAsync(ts, e4, x.buffer, offset(x, [e4]), 4, size4, "ca", access=mine)
    cp8 = kir.CpAsync(ts, e8, x.buffer, offset(x, [e8]), 8, size8, "ca", access=mine)
    wait0 = kir.CpAsyncWait(0, sync_id="wait1")
    barrier = kir.Barrier("sync1")
    read = kir.Load(ts, add(mul(u, const(32)), lane), access=anyone)
    out = store(y, [add(mul(u, const(32)), lane)], read)
    body = [
        kir.Allocate(ts),
        cp16, kir.CpAsyncCommit(),
        kir.ForLoop(j, const(4), [cp4], kind="unroll"), kir.CpAsyncCommit(),
        cp8, kir.CpAsyncCommit(),
        kir.CpAsyncWait(2), kir.CpAsyncWait(1), wait0,
        barrier,
        kir.ForLoop(u, const(n // 32), [out], kind="unroll"),
    ]
    kernel = finish(kir.Kernel(name, [x, y], [], body, launch([const(1)], [const(32)])))
    for cp in (cp16, cp4, cp8):
        wait0.reasons.append(kir.SyncReason(kir.HazardKind.ASYNC, ("ts",), cp, out))
        barrier.reasons.append(kir.SyncReason(kir.HazardKind.RAW, ("ts",), cp, out))
    return kernel


def cp_async_expected(x):
    """y of cp_async_kernel for input x (numpy, 320 f32)."""
    import numpy as np
    y = np.array(x, dtype=np.float32, copy=True)
    for t in range(32):
        if t % 4 == 3:
            y[4 * t:4 * t + 4] = 0
        elif t % 4 == 2:
            y[4 * t + 2:4 * t + 4] = 0
        for j in range(4):
            if (t + j) % 5 == 0:
                y[128 + t + 32 * j] = 0
        if t % 3 == 0:
            y[256 + 2 * t:256 + 2 * t + 2] = 0
    return y


TENSORCORE_KERNELS = {
    **{f"ldmatrix_x{num}{'_trans' if trans else ''}_{dt}":
       (lambda num=num, trans=trans, dt=dt: ldmatrix_kernel(num, trans, dt))
       for num in (1, 2, 4) for trans in (False, True) for dt in (F16, BF16)},
    "mma_f16": lambda: mma_kernel(F16),
    "mma_bf16": lambda: mma_kernel(BF16),
    "ldmatrix_mma_f16": lambda: ldmatrix_mma_kernel(F16),
    "ldmatrix_mma_bf16": lambda: ldmatrix_mma_kernel(BF16),
    "cp_async": cp_async_kernel,
}
