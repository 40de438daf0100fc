"""PTX spellings: the text of every inline-asm statement the CUDA emitter writes for tensor
cores, asynchronous copies and grid synchronization. The instructions' names, shapes,
types and modifiers come from their descriptors (fuserir.instructions: LDMATRIX,
MMA_M16N8K16, CP_ASYNC); this module adds the asm operands and constraints. The emitter
(codegen.cuda.emitter) checks a statement and builds its operands' C text (addresses,
fragment elements); the functions here only spell, and return the statement's lines.

Tensor cores and asynchronous copies are inline PTX (fragment layouts as the PTX ISA gives them):
LdMatrix is `ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16` at the 32-bit
shared-state-space address of its source element (`__cvta_generic_to_shared`, an NVRTC
builtin), each result register unpacked into two elements of the 16-bit fragment buffer,
low half first; Mma is the descriptor's `mma.sync.aligned...` (MMA_M16N8K16.ptx_format)
on registers packed from consecutive fragment elements; CpAsync is `cp.async.{ca|cg}
.shared.global [shared address], [global address], nbytes, src_size` (no src-size operand
where src_size is None: the whole copy); commit and wait are `cp.async.commit_group` and
`cp.async.wait_group n`, a wait's reasons written above it as a barrier's are. The copies,
waits and ldmatrix carry a "memory" clobber so that the compiler moves no ordinary shared
access across them.

Grid synchronization (split-K turnstiles, docs/hazards.md "Across blocks"): Fence is
`__threadfence()`; SemWait spins on `ld.acquire.gpu.global.b32` of its i32 global cell
until it reads the value; SemRelease is `st.release.gpu.global.b32`, SemArrive
`red.release.gpu.global.add.s32` (preamble helpers sem_wait / sem_release / sem_arrive,
each with a "memory" clobber so that no ordinary global access moves across them). A
release orders the releasing thread's own earlier accesses before it; the other threads'
writes it publishes are fenced by their own Fence before the barrier that hands them to
it (the protocols of lowering.passes.grid_reductions write both), so no fence of its own
precedes the release: one __threadfence there was measured on the split-K's critical
path (docs/perf.md).
"""

from fuserir.instructions import CP_ASYNC, LDMATRIX, MMA_M16N8K16 as MMA


def ldmatrix(num, trans, registers, address):
    """`ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16` of `num` matrices into the
    32-bit `registers` (C names) from the shared address `address` (C text): the asm
    statement's two lines, the instruction and its operands."""
    operands = ", ".join(f"%{i}" for i in range(num))
    outs = ", ".join(f'"=r"({r})' for r in registers)
    return [f'asm volatile("{LDMATRIX.ptx(num, trans)} {{{operands}}}, [%{num}];"',
            f'             : {outs} : "r"({address}) : "memory");']


def mma_sync(ab_type, d, a, b, c):
    """The descriptor's mma instruction (MMA_M16N8K16.ptx_format, ab_type "f16" or
    "bf16"): D (4 f32 elements) = A (4 packed registers) x B (2 packed registers) + C (4
    f32 elements), each operand a list of C expressions; the asm statement's lines."""
    d = [f'"=f"({x})' for x in d]
    a = [f'"r"({x})' for x in a]
    b = [f'"r"({x})' for x in b]
    c = [f'"f"({x})' for x in c]
    return [f'asm volatile("{MMA.ptx_format.format(t=ab_type)} '
            '{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, '
            '{%10, %11, %12, %13};"',
            f"    : {', '.join(d)}",
            f"    : {', '.join(a)},",
            f"      {', '.join(b)},",
            f"      {', '.join(c)});"]


def cp_async(cache, nbytes, dst, src, src_size=None):
    """`cp.async.{cache}.shared.global` of `nbytes` bytes from the global address `src` to
    the 32-bit shared address `dst` (C text), reading `src_size` bytes (C text of an
    integer; None: all) and zero-filling the rest: the asm statement's two lines."""
    inputs = f'"r"({dst}), "l"({src})'
    operands = "[%0], [%1], " + str(nbytes)
    if src_size is not None:
        inputs += f', "r"((unsigned int){src_size})'
        operands += ", %2"
    return [f'asm volatile("{CP_ASYNC.ptx(cache)} {operands};"',
            f'             :: {inputs} : "memory");']


def cp_async_commit():
    """`cp.async.commit_group`: closes the group of the thread's copies issued since the
    last commit."""
    return f'asm volatile("{CP_ASYNC.commit};" ::: "memory");'


def cp_async_wait(n):
    """`cp.async.wait_group n`: waits until at most `n` of the thread's committed groups
    are in flight."""
    return f'asm volatile("{CP_ASYNC.wait(n)};" ::: "memory");'


def fence():
    """A memory fence at gpu scope: CUDA's __threadfence()."""
    return "__threadfence();"


# The preamble's grid semaphores (codegen.cuda.preamble registers them as "grid_sync").
SEMAPHORE_HELPERS = r"""
// Grid semaphores (split-K turnstiles and arrival counters): an acquire spin, a release
// store and a release add on an i32 global word, at gpu scope.
__device__ __forceinline__ void sem_wait(const i32* cell, i32 value) {
  i32 seen;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];"
                 : "=r"(seen) : "l"(gmem_addr(cell)) : "memory");
  } while (seen != value);
}
__device__ __forceinline__ void sem_release(i32* cell, i32 value) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;"
               :: "l"(gmem_addr(cell)), "r"(value) : "memory");
}
__device__ __forceinline__ void sem_arrive(i32* cell, i32 value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;"
               :: "l"(gmem_addr(cell)), "r"(value) : "memory");
}
"""
