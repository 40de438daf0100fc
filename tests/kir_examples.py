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

from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F32, F64 = DataType.i32, DataType.i64, DataType.f32, DataType.f64
F16, BF16, BOOL = DataType.f16, DataType.bf16, DataType.bool
ALL_DTYPES = (F16, BF16, F32, F64, I32, I64, BOOL)


# -- small constructors ----------------------------------------------------------------------

def const(value, dtype=I32):
    return kir.Const(value, dtype)


def binop(op, a, b):
    dtype = BOOL if op in kir.COMPARISONS or op in ("and", "or") else a.dtype
    return kir.BinOp(op, a, b, dtype)


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
    "not": (BOOL,),
    **{op: (F32, F64) for op in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "gelu",
                                 "gelu_tanh")},
}
BINARY_DTYPES = {
    **{op: (I32, I64, F32, F64) for op in ("add", "sub", "mul", "div", "mod", "min", "max")},
    "ceildiv": (I32, I64),
    **{op: (I32, I64, F32, F64, BOOL) for op in ("eq", "ne")},
    **{op: (I32, I64, F32, F64) for op in ("lt", "le", "gt", "ge")},
    "and": (BOOL,), "or": (BOOL,),
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
            p = tensor(f"out_{op}_{dt}", dt, [N.var], is_output=True)
            outs.append(p)
            stores.append(store(p, [g], kir.UnOp(op, load(ins[f"a_{dt}"], [g]), dt)))
            cases.append((p.buffer.name, op, dt, (f"a_{dt}",)))
    for op, dts in BINARY_DTYPES.items():
        for dt in dts:
            out_dt = BOOL if op in kir.COMPARISONS else dt
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
