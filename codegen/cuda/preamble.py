"""The preamble: the types and device functions a kernel's CUDA text defines above its
entry point, since NVRTC compiles it without a single #include.

Each snippet is registered under a name with the snippets it depends on; a kernel's
preamble (_preamble) holds the snippets its statements asked for (the emitter's `need`)
and their dependencies, in registration order: the element typedefs, the 16-bit float
structs converted with inline PTX `cvt`, 16-bit shuffles, the vector copies' word types,
the float -> integer and integer division helpers that define what C leaves undefined
(fuserir.numerics), the address conversions inline PTX takes, the grid semaphores, the
sm_90 helpers (wgmma's matrix descriptor, the mbarrier wait, the tensor map type), the
fragment registers' packing, min/max/relu and the op table's functions (sigmoid_f32,
remainder_i32, ...). preamble_names() is every C name a snippet defines (functions and
structs), which kernel IR names must not take (codegen.cuda.names reserves them).
"""

import re

from fuserir import op_table

from . import ptx, ptx_sm90

# Snippets, each included only when the kernel uses it (in this order)

_SNIPPETS = {}
_ORDER = []


def _snippet(name, text, deps=()):
    _SNIPPETS[name] = (text.strip("\n"), tuple(deps))
    _ORDER.append(name)


_snippet("types", r"""
// Element types, named as kernel IR names them.
typedef int i32;
typedef long long i64;
typedef float f32;
typedef double f64;
""")

_snippet("f16", r"""
// f16: IEEE binary16 as a 16-bit struct (no cuda_fp16.h); converted with PTX cvt.
struct __align__(2) f16 { unsigned short x; };
__device__ __forceinline__ f32 f16_to_f32(f16 h) {
  f32 f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x)); return f;
}
__device__ __forceinline__ f16 f32_to_f16(f32 f) {
  f16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f)); return h;
}
__device__ __forceinline__ f16 f64_to_f16(f64 d) {
  f16 h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h.x) : "d"(d)); return h;
}
__device__ __forceinline__ f16 i32_to_f16(i32 v) {
  f16 h; asm("cvt.rn.f16.s32 %0, %1;" : "=h"(h.x) : "r"(v)); return h;
}
__device__ __forceinline__ f16 i64_to_f16(i64 v) {
  f16 h; asm("cvt.rn.f16.s64 %0, %1;" : "=h"(h.x) : "l"(v)); return h;
}
""", deps=("types",))

_snippet("bf16", r"""
// bf16: bfloat16 as a 16-bit struct; bf16 -> f32 is a shift, f32 -> bf16 a PTX cvt.
// From f64 and integers, round to odd at f32 first (exact: 24 >= 8 + 2 bits), since
// cvt.rn.bf16.{f64,s32,s64} needs sm_90.
struct __align__(2) bf16 { unsigned short x; };
__device__ __forceinline__ f32 bf16_to_f32(bf16 h) {
  return __uint_as_float(((unsigned int)h.x) << 16);
}
__device__ __forceinline__ bf16 f32_to_bf16(f32 f) {
  bf16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(f)); return h;
}
__device__ __forceinline__ f32 f32_round_odd(f32 truncated, bool exact) {
  return exact ? truncated : __uint_as_float(__float_as_uint(truncated) | 1u);
}
__device__ __forceinline__ bf16 f64_to_bf16(f64 d) {
  f32 t = __double2float_rz(d); return f32_to_bf16(f32_round_odd(t, (f64)t == d));
}
__device__ __forceinline__ bf16 i32_to_bf16(i32 v) {
  f32 t = __int2float_rz(v); return f32_to_bf16(f32_round_odd(t, (i32)t == v));
}
__device__ __forceinline__ bf16 i64_to_bf16(i64 v) {
  f32 t = __ll2float_rz(v); return f32_to_bf16(f32_round_odd(t, (i64)t == v));
}
""", deps=("types",))

_snippet("shfl_f16", r"""
__device__ __forceinline__ f16 shfl_xor_f16(f16 v, int mask) {
  f16 r; r.x = (unsigned short)__shfl_xor_sync(0xffffffffu, (unsigned int)v.x, mask);
  return r;
}
""", deps=("f16",))

_snippet("shfl_bf16", r"""
__device__ __forceinline__ bf16 shfl_xor_bf16(bf16 v, int mask) {
  bf16 r; r.x = (unsigned short)__shfl_xor_sync(0xffffffffu, (unsigned int)v.x, mask);
  return r;
}
""", deps=("bf16",))

_snippet("welford", r"""
// welford: a one-pass mean and variance's running state (fuserir.numerics): the mean, the
// sum of squared differences from it, the count; 16 bytes, one aligned vector. Merged
// with Chan's update, every operation rounded on its own (no contraction into an fma),
// as the interpreter computes it.
struct __align__(16) welford { f32 mean, m2, count, pad; };
__device__ __forceinline__ welford f32_to_welford(f32 x) {
  return welford{x, __fsub_rn(x, x), 1.0f, 0.0f};
}
__device__ __forceinline__ welford welford_merge(welford a, welford b) {
  f32 n = __fadd_rn(a.count, b.count);
  if (n == 0.0f) return a;
  f32 d = __fsub_rn(b.mean, a.mean), r = __fdiv_rn(b.count, n);
  f32 spread = __fmul_rn(__fmul_rn(d, a.count), __fmul_rn(d, r));
  return welford{__fadd_rn(a.mean, __fmul_rn(d, r)),
                 __fadd_rn(__fadd_rn(a.m2, b.m2), spread), n, 0.0f};
}
__device__ __forceinline__ f32 welford_mean(welford s) {
  return s.m2 != s.m2 || s.count == 0.0f ? __int_as_float(0x7fffffff) : s.mean;
}
__device__ __forceinline__ f32 welford_m2(welford s) { return s.m2; }
__device__ __forceinline__ welford shfl_xor_welford(welford s, int mask) {
  s.mean = __shfl_xor_sync(0xffffffffu, s.mean, mask);
  s.m2 = __shfl_xor_sync(0xffffffffu, s.m2, mask);
  s.count = __shfl_xor_sync(0xffffffffu, s.count, mask);
  return s;
}
""", deps=("types",))

_snippet("vectors", r"""
// Vector copies: 4, 8 or 16 bytes moved by one load and one store (kernel IR's Store and
// Load of width > 1), through these aligned word types.
struct __align__(8) u32x2 { unsigned int x, y; };
struct __align__(16) u32x4 { unsigned int x, y, z, w; };
""")

# float -> integer: PTX cvt.rzi truncates toward zero, saturates (+-inf and values past the
# range give the type's minimum or maximum) and maps NaN to 0 (fuserir.numerics); a C cast
# of such a value is undefined, so the instruction is spelled out.
for _f, _fc in (("f32", "f"), ("f64", "d")):
    for _i, _ic in (("i32", "r"), ("i64", "l")):
        _snippet(f"{_f}_to_{_i}", f"""
__device__ __forceinline__ {_i} {_f}_to_{_i}({_f} x) {{
  {_i} r; asm("cvt.rzi.s{_i[1:]}.{_f} %0, %1;" : "={_ic}"(r) : "{_fc}"(x)); return r;
}}
""", deps=("types",))

# Integer division and remainder where the divisor is not a constant other than 0 and -1:
# C leaves a / 0 and MIN / -1 undefined; fuserir defines a / 0 = 0, a % 0 = a, MIN / -1 =
# MIN (the quotient wraps) and MIN % -1 = 0 (fuserir.numerics), as the interpreter does.
# The division itself is unconditional, by a divisor that is never 0 or -1, and only its
# result is selected: a division under a condition cannot be hoisted or shared by the
# compiler (a guarded a / b by a run-time size was recomputed 25 times in a matmul's main
# loop, 16% of its time), one that is always defined can.
for _t, _u in (("i32", "unsigned int"), ("i64", "unsigned long long")):
    _snippet(f"div_{_t}", f"""
__device__ __forceinline__ {_t} div_{_t}({_t} a, {_t} b) {{
  {_t} q = a / ((b == 0) | (b == -1) ? ({_t})1 : b);
  return b == 0 ? ({_t})0 : b == -1 ? ({_t})(({_u})0 - ({_u})a) : q;
}}
""", deps=("types",))
    _snippet(f"mod_{_t}", f"""
__device__ __forceinline__ {_t} mod_{_t}({_t} a, {_t} b) {{
  {_t} r = a % ((b == 0) | (b == -1) ? ({_t})1 : b);
  return b == 0 ? a : r;
}}
""", deps=("types",))

_snippet("smem_addr", r"""
// Addresses for inline PTX: the 32-bit shared-state-space address of a generic pointer into
// shared memory, and the global-state-space address of a generic pointer into global memory.
__device__ __forceinline__ unsigned int smem_addr(const void* p) {
  return (unsigned int)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ unsigned long long gmem_addr(const void* p) {
  return (unsigned long long)__cvta_generic_to_global(p);
}
""")

_snippet("grid_sync", ptx.SEMAPHORE_HELPERS, deps=("types", "smem_addr"))

_snippet("wgmma_desc", ptx_sm90.WGMMA_DESCRIPTOR_HELPER, deps=("smem_addr",))

_snippet("mbar_wait", ptx_sm90.MBARRIER_WAIT_HELPER)

for _dtype, _ctype in (("f32", "f32"), ("i32", "i32"), ("f64", "f64")):
    _snippet(f"cluster_ld_{_dtype}", ptx_sm90.cluster_load_helper(_ctype, _dtype),
             deps=("types",))

_snippet("tensor_map", r"""
// TMA tensor maps: CUtensorMap's 128 opaque bytes, passed by value as a
// `const __grid_constant__` kernel parameter (encoded on the host at launch).
struct alignas(64) TensorMap { unsigned long long opaque[16]; };
""")

_snippet("b16_pack", r"""
// Fragment registers: two 16-bit values per 32-bit register, low half first (PTX ISA).
__device__ __forceinline__ unsigned int pack_b16(unsigned short lo, unsigned short hi) {
  return (unsigned int)lo | ((unsigned int)hi << 16);
}
__device__ __forceinline__ unsigned short lo_b16(unsigned int r) {
  return (unsigned short)(r & 0xffffu);
}
__device__ __forceinline__ unsigned short hi_b16(unsigned int r) {
  return (unsigned short)(r >> 16);
}
""")

# min/max propagate NaN (as numpy's minimum/maximum do; fminf/fmaxf would drop it).
for _t in ("i32", "i64", "f32", "f64"):
    _nan = " || a != a" if _t[0] == "f" else ""
    _snippet(f"min_{_t}", f"""
__device__ __forceinline__ {_t} min_{_t}({_t} a, {_t} b) {{ return (a < b{_nan}) ? a : b; }}
""", deps=("types",))
    _snippet(f"max_{_t}", f"""
__device__ __forceinline__ {_t} max_{_t}({_t} a, {_t} b) {{ return (a > b{_nan}) ? a : b; }}
""", deps=("types",))
    # relu keeps NaN (x < 0 is false for NaN), as numpy's maximum(x, 0) does.
    _zero = {"i32": "0", "i64": "0LL", "f32": "0.0f", "f64": "0.0"}[_t]
    _snippet(f"relu_{_t}", f"""
__device__ __forceinline__ {_t} relu_{_t}({_t} x) {{ return x < {_zero} ? {_zero} : x; }}
""", deps=("types",))

# The ops fuserir.op_table spells as a preamble function, per type: of x (a unary op; a
# predicate's is bool) or of a and b (a binary op). An expression stands on one line where
# it fits in 100 columns, statements (a body with a return) on a line each; the table's
# comment goes above the f32 one. A body that calls another snippet depends on it.
def _op_snippet(op, t, parameters, body, comment=None):
    head = (f"__device__ __forceinline__ {'bool' if op.kind == 'predicate' else t} "
            f"{op.name}_{t}({parameters})")
    if "return" in body:
        text = f"{head} {{\n" + "".join(f"  {line}\n" for line in body.splitlines()) + "}"
    else:
        line = f"{head} {{ return {body}; }}"
        text = line if len(line) <= 100 else f"{head} {{\n  return {body};\n}}"
    if comment and t == "f32":
        text = f"// {comment}\n{text}"
    calls = tuple(n for n in re.findall(r"(\w+)\(", body) if n in _SNIPPETS)
    _snippet(f"{op.name}_{t}", f"\n{text}\n", deps=("types",) + calls)


for _op in op_table.UNARY.values():
    for _t, _body in (_op.preamble or {}).items():
        _op_snippet(_op, _t, f"{_t} x", _body, _op.comment)
for _op in op_table.BINARY.values():
    for _t, _body in (_op.preamble or {}).items():
        _op_snippet(_op, _t, f"{_t} a, {_t} b", _body)


def _preamble(needed):
    closure = []

    def add(name):
        if name in closure:
            return
        for dep in _SNIPPETS[name][1]:
            add(dep)
        closure.append(name)

    for name in needed:
        add(name)
    return "\n\n".join(_SNIPPETS[n][0] for n in _ORDER if n in closure)


def preamble_names():
    """Every C name a preamble may define (kernel IR names must avoid these)."""
    names = set()
    for text, _ in _SNIPPETS.values():
        names.update(re.findall(r"(\w+)\(", text))
        names.update(re.findall(r"\bstruct\s+(?:\w+\(\d+\)\s+)?(\w+)", text))
    return names
