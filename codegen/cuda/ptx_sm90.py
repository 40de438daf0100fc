"""PTX spellings of the sm_90 statements (kir.hopper): the text of every inline-asm
statement codegen.cuda.hopper writes for warp-group MMA, stmatrix, register reallocation,
named barriers, the async-proxy and mbarrier-init fences and mbarriers, and the preamble
helpers they call (TMA's are codegen.cuda.tma's, beside its rules). It sits beside codegen.cuda.ptx (the sm_80 spellings) so that
neither grows past a readable size; as there, the instructions' names come from their
descriptors (fuserir.instructions: WGMMA, STMATRIX, SETMAXNREG, NAMED_BARRIER,
PROXY_FENCE, MBARRIER, CLUSTER), and the functions here only add the asm operands and
constraints and return the statement's lines. The emitter checks a statement and builds
its operands' C text.

Every statement carries a "memory" clobber, so that the compiler moves no ordinary
memory access across an instruction whose effects the async proxy or another thread
sees. Shared addresses are 32-bit shared-state-space addresses (smem_addr), a tensor map
the generic address of its `__grid_constant__` parameter (an "l" operand).
"""

from fuserir.instructions import (CLUSTER, MBARRIER, NAMED_BARRIER, PROXY_FENCE,
                                  SETMAXNREG, STMATRIX, WGMMA)

_PER_LINE = 8       # %operands per line of the asm string's long lists
_WIDTH = 96         # columns an operand line of the statement fills before it wraps


def statement(op):
    """An asm statement without outputs or inputs: one line."""
    return f'asm volatile("{op};" ::: "memory");'


def asm(text_lines, outputs, inputs):
    """An asm statement: its PTX string literals (one per line), its outputs' and inputs'
    C operand text (wrapped at _WIDTH columns), then the "memory" clobber."""
    first, *rest = text_lines
    lines = [f"asm volatile({first}"] + [f"             {t}" for t in rest]

    def operand_lines(lead, operands):
        out, line = [], f"    {lead}"
        for i, x in enumerate(operands):
            x += "," if i + 1 < len(operands) else ""
            if len(line) + 1 + len(x) > _WIDTH and line.strip() != lead:
                out.append(line)
                line = " " * (len(lead) + 4)
            line += " " + x
        return out + [line]

    if outputs:
        lines += operand_lines(":", outputs) + operand_lines(":", inputs)
    else:
        lines += operand_lines("::", inputs)
    lines.append('    : "memory");')
    return lines


def _braced_operands(first, count):
    """The asm string literals of the PTX vector `{%first, ..., %(first + count - 1)}, `,
    _PER_LINE operands to a literal."""
    names = [f"%{first + i}" for i in range(count)]
    chunks = [", ".join(names[i:i + _PER_LINE]) for i in range(0, count, _PER_LINE)]
    return [f'"{"{" if i == 0 else ""}{c}{"}" if i + 1 == len(chunks) else ""}, "'
            for i, c in enumerate(chunks)]


# -- warp-group MMA ---------------------------------------------------------------------

def wgmma(n, dtype, accumulators, a, b_descriptor, scale_d, trans_a, trans_b):
    """WGMMA's m64n{n}k16 instruction: D (the n / 2 f32 `accumulators`, read and written)
    = A x B + (D if scale_d else 0). `a` is A's descriptor (C text of a u64: A in shared
    memory, `trans_a` its transpose immediate) or a list of 4 packed registers (A in
    registers: no transpose immediate); `scale_d` C text of an i32, turned into the
    predicate inside the asm block."""
    count = len(accumulators)
    registers = isinstance(a, list)
    a_operands = a if registers else [a]
    at = count + len(a_operands)          # B's descriptor, then scale-d
    if registers:
        a_text = "{" + ", ".join(f"%{count + i}" for i in range(4)) + "}"
        immediates = f"p, 1, 1, {int(trans_b)}"
    else:
        a_text = f"%{count}"
        immediates = f"p, 1, 1, {int(trans_a)}, {int(trans_b)}"
    text = (['"{\\n"', '".reg .pred p;\\n"', f'"setp.ne.b32 p, %{at + 1}, 0;\\n"',
             f'"{WGMMA.ptx(n, dtype)} "'] + _braced_operands(0, count)
            + [f'"{a_text}, %{at}, {immediates};\\n"', '"}"'])
    inputs = [f'"r"({x})' if registers else f'"l"({x})' for x in a_operands]
    inputs += [f'"l"({b_descriptor})', f'"r"({scale_d})']
    return asm(text, [f'"+f"({x})' for x in accumulators], inputs)


def wgmma_fence():
    """`wgmma.fence.sync.aligned`: the warp group's register accesses before it are
    ordered before its next wgmma."""
    return statement(WGMMA.fence)


def wgmma_commit():
    """`wgmma.commit_group.sync.aligned`: the wgmmas since the last commit form a group."""
    return statement(WGMMA.commit)


def wgmma_wait(n):
    """`wgmma.wait_group.sync.aligned n`: at most n committed groups stay pending."""
    return statement(WGMMA.wait(n))


# The preamble's matrix descriptor (codegen.cuda.preamble registers it as "wgmma_desc").
# `layout` is fuserir.instructions.MatrixDescriptor(0, leading, stride, swizzle).encode()
# (spelled by the emitter): the start address field, bits 0-13, holds address >> 4.
WGMMA_DESCRIPTOR_HELPER = r"""
// wgmma matrix descriptor (fuserir.instructions.MatrixDescriptor): the constant layout
// word (leading and stride byte offsets, swizzle mode) with the start address of the
// operand's first element, >> 4, in bits 0-13.
__device__ __forceinline__ unsigned long long wgmma_desc(const void* start,
                                                         unsigned long long layout) {
  return layout | (unsigned long long)((smem_addr(start) >> 4) & 0x3FFFu);
}
"""


# -- stmatrix, setmaxnreg, named barriers, fences -----------------------------------------

def stmatrix(num, trans, address, registers):
    """STMATRIX's x{num}{.trans} of the 32-bit packed `registers` (C text) to the shared
    address `address`."""
    regs = ", ".join(f"%{i + 1}" for i in range(num))
    inputs = [f'"r"({address})'] + [f'"r"({r})' for r in registers]
    return asm([f'"{STMATRIX.ptx(num, trans)} [%0], {{{regs}}};"'], [], inputs)


def setmaxnreg(increase, count):
    """`setmaxnreg.{inc|dec}.sync.aligned.u32 count`."""
    return statement(SETMAXNREG.ptx["set"].format(direction="inc" if increase else "dec",
                                                   count=count))


def named_barrier(barrier_id, count, arrive_only):
    """`bar.sync id, count` (or `bar.arrive id, count`)."""
    role = "arrive" if arrive_only else "sync"
    return statement(NAMED_BARRIER.ptx[role].format(id=barrier_id, count=count))


def fence_proxy_async():
    """`fence.proxy.async.shared::cta`."""
    return statement(PROXY_FENCE.ptx["fence"])


def fence_mbarrier_init():
    """`fence.mbarrier_init.release.cluster`."""
    return statement(MBARRIER.ptx["init_fence"])


# -- mbarriers ----------------------------------------------------------------------------

def mbarrier_init(address, count):
    """`mbarrier.init.shared::cta.b64 [address], count` (C text: a shared address, an
    i32)."""
    return asm([f'"{MBARRIER.ptx["init"]} [%0], %1;"'], [],
                [f'"r"({address})', f'"r"({count})'])


def mbarrier_arrive(address, tx_bytes=None):
    """`mbarrier.arrive.shared::cta.b64 _, [address]`, or with `tx_bytes` (C text of an
    i32) `mbarrier.arrive.expect_tx.shared::cta.b64 _, [address], tx_bytes`; the state
    goes to the sink `_`."""
    if tx_bytes is None:
        return asm([f'"{MBARRIER.ptx["arrive"]} _, [%0];"'], [], [f'"r"({address})'])
    return asm([f'"{MBARRIER.ptx["arrive_tx"]} _, [%0], %1;"'], [],
                [f'"r"({address})', f'"r"({tx_bytes})'])


# The preamble's mbarrier test (codegen.cuda.preamble registers it as "mbar_wait"): the
# emitter spins on it in C, so no asm label is repeated when a kernel waits twice.
MBARRIER_WAIT_HELPER = rf"""
// mbarrier wait: whether the phase of `parity` of the mbarrier at shared address `bar`
// has completed (try_wait may also give up after a time-out: callers loop).
__device__ __forceinline__ bool mbar_try_wait(unsigned int bar, unsigned int parity) {{
  unsigned int done;
  asm volatile("{{\n"
               ".reg .pred p;\n"
               "{MBARRIER.ptx["try_wait"]} p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n"
               "}}"
               : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0;
}}
"""


# -- thread-block clusters --------------------------------------------------------------

def cluster_barrier():
    """`barrier.cluster.arrive.release` then `barrier.cluster.wait.acquire`: one asm
    statement, so that nothing is scheduled between the arrival and the wait."""
    return statement(f'{CLUSTER.ptx["arrive"]}; {CLUSTER.ptx["wait"]}')


# The element types a cluster load reads: PTX type, asm constraint of the result
CLUSTER_LOAD_TYPES = {"f32": ("f32", "f"), "i32": ("s32", "r"), "f64": ("f64", "d")}


def cluster_load_helper(ctype, dtype):
    """The preamble's `cluster_ld_<dtype>(address, rank)`: the element at shared address
    `address` of this CTA's pool, read from the cluster's CTA `rank` (mapa, then
    ld.shared::cluster; volatile with a memory clobber, so that no load moves across a
    cluster barrier)."""
    ptx_type, constraint = CLUSTER_LOAD_TYPES[dtype]
    load = CLUSTER.ptx["load"].format(type=ptx_type)
    return f"""
__device__ __forceinline__ {ctype} cluster_ld_{dtype}(unsigned int address, unsigned int rank) {{
  unsigned int remote;
  {ctype} value;
  asm("{CLUSTER.ptx["map"]} %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  asm volatile("{load} %0, [%1];" : "={constraint}"(value) : "r"(remote) : "memory");
  return value;
}}
"""
