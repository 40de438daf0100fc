"""Kernel IR -> CUDA C++ text that NVRTC compiles without a single #include.

`emit_cuda(kernel)` returns one self-contained translation unit: a preamble holding only
what the kernel uses (type names, 16-bit float structs converted with inline PTX `cvt`,
math helpers), then the kernel as `extern "C" __global__`.

The ABI, shared with the launcher (codegen.launch) and the interpreter:

    extern "C" __global__ void <entry_point(kernel)>(
        one pointer per TensorParam, in kernel.tensor_params order
            (`const T* __restrict__` for inputs, `T*` for outputs),
        every stride Var of every TensorParam, tensor by tensor, axis by axis (elements),
        one pointer per Workspace, in kernel.workspaces order (`T*`),
        every ScalarParam var, in kernel.scalar_params order)

strides and scalars in the kernel's index dtype (i32 = int, i64 = long long); the user's
names (tensors, sizes, scalars, the fusion's) are mangled (x -> x_, N -> N_s, f ->
f_kernel: see mangle), generated ones kept (i0, x_stride0). Shared
buffers live in one dynamic pool, `extern __shared__ unsigned char smem[]`, each at its
byte_offset, so the launch passes shared_bytes(kernel, scalars) as dynamic shared memory.

Types are spelled as kernel IR spells them (`i32`, `i64`, `f32`, `f64`, `f16`, `bf16`,
`bool`) through typedefs, so a CUDA line reads like its kernel IR line; each statement
ends with a `// S12` comment naming the kir statement it came from. Kernel IR is
explicitly typed and the emitter trusts no implicit C conversion: every operand must
already have the type its node computes in (a violation is a lowering bug, reported as
CodegenError naming the expression), and each Cast becomes an explicit C cast or a
preamble conversion. f16/bf16 never take part in arithmetic; they are converted through
f32 (exactly) or with round-to-odd where a direct PTX cvt needs sm_90.

Semantics chosen where C leaves a choice: min/max propagate NaN and relu keeps it (as
numpy's minimum/maximum do; fminf/fmaxf would drop it); `mod` on floats is fmod (the sign
of the dividend, like C's %); `not` is logical and takes bool only; ceildiv is
(a + b - 1) / b. Where C's behaviour is undefined, fuserir.numerics defines it and the
emitter spells it out: a float -> integer cast is PTX cvt.rzi (saturating, NaN -> 0;
preamble f32_to_i32 ...), and an integer / or % whose divisor is not a constant other than
0 and -1 goes through the preamble's div_i32 / mod_i32 (a / 0 = 0, a % 0 = a, MIN / -1 =
MIN). NVRTC's default --fmad=true may contract an f32 `a * b + c` into one fma:
results equal the interpreter's separately rounded ones wherever the product is exact
(integer-valued data), and are within rounding elsewhere.

Vector copies (a Store of width w > 1 whose value is a Load of width w, 4, 8 or 16 bytes)
are one load and one store of an aligned word type (`unsigned int`, u32x2, u32x4) through
reinterpret_cast: lowering proved both sides contiguous and aligned, the executable
checks the global arrays' strides and alignment before the launch.

Tensor cores, asynchronous copies and grid synchronization are inline PTX, spelled in
codegen.cuda.ptx. The emitter checks what it can see (memories, dtypes, sizes, .cg only
for 16 bytes, constant alignment and fragment bounds); contiguity and alignment of a copy's
global source are the lowering's to guarantee. Semaphore buffers must be global i32;
index and value are integers (the value is cast to i32).
"""

from fuserir.dtypes import DataType
from lowering import kir

from ..errors import CodegenError
from . import ptx
from .literals import _literal
from .names import (_ARITH, _FLOAT, _HALF, _IDENT, _INT, _MATH, _RESERVED, _VECTOR_WORDS,
                    C_TYPES, entry_point, mangle)
from .preamble import _preamble

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<",
          "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&",
          "or": "||", "xor": "^"}


def emit_cuda(kernel):
    """CUDA C++ source of `kernel` (a kir.Kernel); see the module docstring for the ABI."""
    return _Emitter(kernel).run()


def _where(expr):
    try:
        return kir.format_expr(expr)
    except Exception:          # noqa: BLE001 - a malformed node still gets a message
        return type(expr).__name__


class _Emitter:
    def __init__(self, kernel):
        self.kernel = kernel
        self.needed = {"types"}
        self.names = {}            # kernel IR name -> C identifier
        self.taken = set()
        self.lines = []
        self.stmt = None           # the statement being emitted (for messages)

    # -- names ---------------------------------------------------------------------------
    def ident(self, x):
        """The C identifier of a Var or Buffer, one per name key (kir.name_key): a user's
        name mangled (see mangle), a generated one as it is unless it is reserved or
        taken (then with underscores appended)."""
        key = x.key
        if key in self.names:
            return self.names[key]
        name = x.name
        if not isinstance(name, str) or not name:
            raise self.error(f"{name!r} is not a name")
        if x.user:          # distinct from every fixed name by construction (see mangle)
            c = mangle(name, "tensor" if isinstance(x, kir.Buffer) else "scalar")
            while c in _RESERVED or c in self.taken:
                c += "_"
        elif not _IDENT.match(name):
            raise self.error(f"{name!r} is not a C identifier")
        else:
            c = name
            while c in _RESERVED or c in self.taken or c.startswith("__"):
                c = c.lstrip("_") + "_" if c.startswith("__") else c + "_"
        self.names[key] = c
        self.taken.add(c)
        return c

    def reserve_user_names(self):
        """Give the user's names their identifiers first, so that no generated name that
        happens to look like a mangled one (a loop index w_s of a tensor named s) takes
        it."""
        k = self.kernel
        for p in k.tensor_params:
            self.ident(p.buffer)
        for s in kir.walk(k.body):
            if isinstance(s, kir.Allocate) and s.buffer.user:
                self.ident(s.buffer)
        for p in k.scalar_params:
            if p.var.user:
                self.ident(p.var)

    def error(self, message):
        where = ""
        if self.stmt is not None:
            try:
                where = f" in {self.stmt.label}: {kir.format_stmt(self.stmt)}"
            except Exception:  # noqa: BLE001 - a statement the printer does not know
                where = f" in {getattr(self.stmt, 'label', '?')}"
        return CodegenError(f"kernel {self.kernel.name}{where}: {message}")

    def need(self, name):
        self.needed.add(name)

    # -- driver --------------------------------------------------------------------------
    def run(self):
        k = self.kernel
        entry = entry_point(k)
        if not isinstance(entry, str) or not _IDENT.match(entry) or entry in _RESERVED:
            raise self.error(f"kernel name {k.name!r} is not a usable C identifier")
        self.taken.add(entry)
        if k.index_dtype not in _INT:
            raise self.error(f"index dtype must be i32 or i64, got {k.index_dtype}")
        self.reserve_user_names()
        signature = self.signature()
        body = []
        if any(isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared
               for s in kir.walk(k.body)):
            body.append("  // Shared buffers: one dynamic pool; each buffer sits at its "
                        "byte offset (buffers that overlap alias).")
            body.append("  extern __shared__ __align__(16) unsigned char smem[];")
        self.lines = body
        self.stmts(k.body, 1)
        self.stmt = None
        ctype = C_TYPES[k.index_dtype]
        head = [f"// Kernel {k.name}, generated by fuserir from kernel IR.",
                "// Self-contained, includes no headers (NVRTC finds none).",
                f"// Index type {ctype}. Trailing // S<n> comments name kernel IR statements.",
                ""]
        return "\n".join(head + [_preamble(self.needed), "", signature]
                         + self.lines + ["}", ""])

    def signature(self):
        k = self.kernel
        ctype = C_TYPES[k.index_dtype]
        params = []     # (declaration, comment)
        for p in k.tensor_params:
            b = p.buffer
            if b.memory is not kir.Memory.global_:
                raise self.error(f"tensor parameter {b.name} is in {b.memory.value} memory")
            t = self.type_of(b.dtype)
            decl = f"{t}* {self.ident(b)}" if p.is_output else \
                f"const {t}* __restrict__ {self.ident(b)}"
            sizes = ", ".join(_where(s) for s in p.sizes)
            params.append((decl, f"{'output' if p.is_output else 'input'} "
                                 f"{b.dtype}[{sizes}]"))
        for p in k.tensor_params:
            if len(p.strides) != len(p.sizes):
                raise self.error(f"tensor {p.buffer.name} has {len(p.sizes)} sizes but "
                                 f"{len(p.strides)} strides")
            for axis, s in enumerate(p.strides):
                self.check_index_var(s, f"stride {axis} of {p.buffer.name}")
                params.append((f"{ctype} {self.ident(s)}",
                               f"stride of {p.buffer.name} axis {axis} (elements)"))
        for w in k.workspaces:
            b = w.buffer
            if not isinstance(w, kir.Workspace) or not isinstance(b, kir.Buffer):
                raise self.error(f"workspace {w!r} is not a kir.Workspace of a Buffer")
            if b.memory is not kir.Memory.global_:
                raise self.error(f"workspace {b.name} is in {b.memory.value} memory")
            t = self.type_of(b.dtype)
            zeroed = ", zeroed" if w.zeroed else ""
            params.append((f"{t}* {self.ident(b)}",
                           f"workspace {b.dtype}[{_where(w.size)}]{zeroed}"))
        for p in k.scalar_params:
            self.check_index_var(p.var, "scalar parameter")
            params.append((f"{ctype} {self.ident(p.var)}", "scalar"))
        if not params:
            return f'extern "C" __global__ void {entry_point(k)}() {{'
        width = max(len(d) for d, _ in params) + 1
        lines = [f'extern "C" __global__ void {entry_point(k)}(']
        for i, (decl, comment) in enumerate(params):
            sep = "," if i + 1 < len(params) else ")"
            lines.append(f"    {(decl + sep).ljust(width)}  // {comment}")
        return "\n".join(lines + ["{"])

    def check_index_var(self, var, what):
        if not isinstance(var, kir.Var):
            raise self.error(f"{what} must be a Var, got {_where(var)}")
        if var.dtype is not self.kernel.index_dtype:
            raise self.error(f"{what} {var.name} is {var.dtype}, the kernel's index dtype "
                             f"is {self.kernel.index_dtype}")

    def type_of(self, dtype):
        if dtype not in C_TYPES:
            raise self.error(f"unknown dtype {dtype!r}")
        if dtype in _HALF:
            self.need(dtype.value)
        return C_TYPES[dtype]

    # -- statements ----------------------------------------------------------------------
    def emit(self, depth, text, label=None):
        line = "  " * depth + text
        if label:
            line += f"  // {label}"
        self.lines.append(line)

    def emit_lines(self, depth, lines, label):
        """A statement of several lines (an asm statement), `label` on the first."""
        first, *rest = lines
        self.emit(depth, first, label)
        for line in rest:
            self.emit(depth, line)

    def stmts(self, stmts, depth):
        for s in stmts:
            self.stmt = s
            method = getattr(self, f"s_{type(s).__name__}", None)
            if method is None:
                raise self.error(f"the CUDA emitter has no rule for {type(s).__name__}")
            method(s, depth)

    def s_Allocate(self, s, depth):
        b = s.buffer
        t = self.type_of(b.dtype)
        name = self.ident(b)
        what = kir.format_stmt(s)
        if b.memory is kir.Memory.local:
            if not isinstance(b.size, kir.Const) or b.size.dtype not in _INT or \
                    int(b.size.value) <= 0:
                raise self.error(f"local buffer {b.name} needs a positive constant size")
            self.emit(depth, f"{t} {name}[{int(b.size.value)}];", f"{s.label}: {what}")
        elif b.memory is kir.Memory.shared:
            if b.byte_offset is None:
                raise self.error(f"shared buffer {b.name} has no byte_offset (the "
                                 "allocation pass places shared buffers)")
            if isinstance(b.byte_offset, kir.Const) and \
                    int(b.byte_offset.value) % b.dtype.itemsize:
                raise self.error(f"shared buffer {b.name} at byte {b.byte_offset.value} is "
                                 f"not aligned to its {b.dtype.itemsize}-byte elements")
            off = self.expr(b.byte_offset)
            if b.byte_offset.dtype not in _INT:
                raise self.error(f"byte offset of {b.name} must be an integer")
            self.emit(depth, f"{t}* {name} = reinterpret_cast<{t}*>(smem + {off});",
                      f"{s.label}: {what}")
        else:
            raise self.error(f"cannot allocate {b.name} in {b.memory.value} memory inside a "
                             "kernel (global buffers are parameters)")

    def s_Store(self, s, depth):
        b = s.buffer
        if s.value.dtype is not b.dtype:
            raise self.error(f"storing a {s.value.dtype} value into {b.dtype} buffer "
                             f"{b.name} (lowering must Cast)")
        if s.width != 1:
            return self.vector_store(s, depth)
        self.emit(depth, f"{self.subscript(b, s.index)} = {_bare(self.expr(s.value))};",
                  s.label)

    def vector_store(self, s, depth):
        """A Store of `width` elements whose value is a Load of as many: one load and one
        store of a 4-, 8- or 16-byte word type; or of the constant 0: a store of a zero
        word (a zero-filled tile's vectors out of bounds)."""
        src, nbytes = s.value, s.width * s.buffer.dtype.itemsize
        zeros = isinstance(src, kir.Const) and src.value == 0
        if not zeros and (not isinstance(src, kir.Load) or src.width != s.width):
            raise self.error(f"a vector store of {s.width} elements to {s.buffer.name} "
                             f"must store a load of {s.width} elements (or zeros)")
        word = _VECTOR_WORDS.get(nbytes) if not isinstance(s.width, bool) else None
        if word is None:
            raise self.error(f"a vector store moves 4, 8 or 16 bytes, got {s.width} x "
                             f"{s.buffer.dtype}")
        sides = [(s.buffer, s.index)] + ([] if zeros else [(src.buffer, src.index)])
        for buffer, index in sides:
            self.check_memory(buffer, (kir.Memory.global_, kir.Memory.shared),
                              "vector access")
            off = buffer.byte_offset
            if isinstance(off, kir.Const) and int(off.value) % nbytes:
                raise self.error(f"shared buffer {buffer.name} at byte {off.value} is not "
                                 f"aligned to {nbytes}-byte vectors")
            if isinstance(index, kir.Const) and int(index.value) % s.width:
                raise self.error(f"vector access {buffer.name}[{index.value}] is not "
                                 f"aligned to {s.width} elements")
        if nbytes > 4:
            self.need("vectors")
        dst = f"*reinterpret_cast<{word}*>(&{self.subscript(s.buffer, s.index)})"
        value = (f"{word}{{}}" if zeros else
                 f"*reinterpret_cast<const {word}*>(&{self.subscript(src.buffer, src.index)})")
        self.emit(depth, f"{dst} = {value};", self.describe(s))

    def s_ForLoop(self, s, depth):
        v = s.var
        if not isinstance(v, kir.Var) or v.dtype not in _INT:
            raise self.error("a loop variable must be an integer Var")
        if s.extent.dtype is not v.dtype:
            raise self.error(f"loop extent {_where(s.extent)} is {s.extent.dtype}, its "
                             f"variable {v.name} is {v.dtype}")
        if s.kind not in ("serial", "unroll"):
            raise self.error(f"unknown loop kind {s.kind!r}")
        name = self.ident(v)
        ext = self.expr(s.extent)
        if s.kind == "unroll":
            self.emit(depth, "#pragma unroll")
        t = C_TYPES[v.dtype]
        zero = "0LL" if v.dtype is DataType.i64 else "0"
        self.emit(depth, f"for ({t} {name} = {zero}; {name} < {ext}; ++{name}) {{", s.label)
        self.stmts(s.body, depth + 1)
        self.emit(depth, "}")

    def s_IfThenElse(self, s, depth):
        if s.cond.dtype is not DataType.bool:
            raise self.error(f"if condition {_where(s.cond)} is {s.cond.dtype}, not bool")
        cond = _bare(self.expr(s.cond))
        self.emit(depth, f"if ({cond}) {{", s.label)
        self.stmts(s.then_body, depth + 1)
        if s.else_body:
            self.stmt = s
            self.emit(depth, "} else {", s.label)
            self.stmts(s.else_body, depth + 1)
        self.emit(depth, "}")

    def s_Barrier(self, s, depth):
        sid = s.sync_id or "barrier"
        for reason in s.reasons:
            self.emit(depth, f"// {sid}: {_comment_safe(str(reason))}")
        tag = f"{s.label} {s.sync_id}" if s.sync_id else s.label
        self.emit(depth, "__syncthreads();", tag)

    def s_Comment(self, s, depth):
        lines = str(s.text).splitlines() or [""]
        for i, line in enumerate(lines):
            text = f"// {_comment_safe(line)}".rstrip()
            self.emit(depth, text + (f"  ({s.label})" if i == len(lines) - 1 else ""))

    # -- tensor cores and asynchronous copies (inline PTX) ---------------------------------
    def check_memory(self, buffer, memory, role):
        """buffer is a Buffer in `memory` (or one of a tuple of memories)."""
        if buffer is None or not isinstance(buffer, kir.Buffer):
            raise self.error(f"{role} is not a Buffer: {buffer!r}")
        allowed = memory if isinstance(memory, tuple) else (memory,)
        if buffer.memory not in allowed:
            raise self.error(f"{role} {buffer.name} is in {buffer.memory.value} memory, not "
                             f"{' or '.join(m.value for m in allowed)}")
        self.type_of(buffer.dtype)

    def describe(self, s):
        """`S12: <kernel IR line>` for a statement's trailing comment."""
        try:
            return f"{s.label}: {_comment_safe(kir.format_stmt(s))}"
        except Exception:  # noqa: BLE001 - a field the printer cannot print
            return s.label

    def fragment(self, buffer, index, k, count, role):
        """`buffer[index + k]` of a local fragment buffer, where elements index ..
        index + count - 1 are the fragment (checked against the size where index is a
        constant)."""
        if index is None or index.dtype not in _INT:
            raise self.error(f"{role} index of {buffer.name} must be an integer expression")
        name = self.ident(buffer)
        if isinstance(index, kir.Const):
            base = int(index.value)
            size = int(buffer.size.value) if isinstance(buffer.size, kir.Const) else None
            if base < 0 or (size is not None and base + count > size):
                raise self.error(f"{role} {buffer.name}[{base}..{base + count - 1}] is out of "
                                 f"bounds of its {size} elements")
            return f"{name}[{base + k}]"
        if k == 0:
            return f"{name}[{_bare(self.expr(index))}]"
        one = f"{k}LL" if index.dtype is DataType.i64 else f"{k}"
        return f"{name}[{self.expr(index)} + {one}]"

    def s_LdMatrix(self, s, depth):
        if s.num not in (1, 2, 4) or isinstance(s.num, bool):
            raise self.error(f"ldmatrix takes 1, 2 or 4 matrices, got {s.num!r}")
        if not isinstance(s.trans, bool):
            raise self.error(f"ldmatrix trans must be a bool, got {s.trans!r}")
        self.check_memory(s.src, kir.Memory.shared, "ldmatrix source")
        self.check_memory(s.dst, kir.Memory.local, "ldmatrix destination")
        for role, b in (("source", s.src), ("destination", s.dst)):
            if b.dtype not in _HALF:
                raise self.error(f"ldmatrix {role} {b.name} is {b.dtype}; ldmatrix moves "
                                 "16-bit elements (f16 or bf16)")
        if s.src.dtype is not s.dst.dtype:
            raise self.error(f"ldmatrix from {s.src.dtype} {s.src.name} into {s.dst.dtype} "
                             f"{s.dst.name} (lowering must keep one element type)")
        if s.address is None:
            raise self.error("ldmatrix has no address")
        self.need("smem_addr")
        self.need("b16_pack")
        regs = [f"ldm{i}" for i in range(s.num)]
        addr = f"smem_addr(&{self.subscript(s.src, s.address)})"
        self.emit(depth, "{", self.describe(s))
        self.emit(depth + 1, f"unsigned int {', '.join(regs)};")
        self.emit_lines(depth + 1, ptx.ldmatrix(s.num, s.trans, regs, addr), s.label)
        for i, r in enumerate(regs):
            lo = self.fragment(s.dst, s.dst_index, 2 * i, 2 * s.num, "ldmatrix destination")
            hi = self.fragment(s.dst, s.dst_index, 2 * i + 1, 2 * s.num,
                               "ldmatrix destination")
            self.emit(depth + 1, f"{lo}.x = lo_b16({r}); {hi}.x = hi_b16({r});")
        self.emit(depth, "}")

    def s_Mma(self, s, depth):
        if s.dtype not in _HALF:
            raise self.error(f"mma inputs must be f16 or bf16, got {s.dtype}")
        for role, b, dtype in (("A", s.a, s.dtype), ("B", s.b, s.dtype),
                               ("C", s.c, DataType.f32), ("D", s.d, DataType.f32)):
            self.check_memory(b, kir.Memory.local, f"mma {role} fragment")
            if b.dtype is not dtype:
                raise self.error(f"mma {role} fragment {b.name} is {b.dtype}, the "
                                 f"instruction takes {dtype}")
        self.need("b16_pack")

        def packed(buf, index, count, role):
            regs = []
            for i in range(count // 2):
                lo = self.fragment(buf, index, 2 * i, count, role)
                hi = self.fragment(buf, index, 2 * i + 1, count, role)
                regs.append(f"pack_b16({lo}.x, {hi}.x)")
            return regs

        a = packed(s.a, s.a_index, 8, "mma A")
        b = packed(s.b, s.b_index, 4, "mma B")
        c = [self.fragment(s.c, s.c_index, i, 4, "mma C") for i in range(4)]
        d = [self.fragment(s.d, s.d_index, i, 4, "mma D") for i in range(4)]
        self.emit_lines(depth, ptx.mma_sync(s.dtype.value, d, a, b, c), self.describe(s))

    def s_CpAsync(self, s, depth):
        if s.nbytes not in (4, 8, 16) or isinstance(s.nbytes, bool):
            raise self.error(f"cp.async copies 4, 8 or 16 bytes, got {s.nbytes!r}")
        if s.cache not in ("ca", "cg"):
            raise self.error(f"cp.async cache operator must be 'ca' or 'cg', got {s.cache!r}")
        if s.cache == "cg" and s.nbytes != 16:
            raise self.error(f"cp.async.cg copies 16 bytes only, got {s.nbytes} (4- and "
                             "8-byte copies use .ca)")
        self.check_memory(s.dst, kir.Memory.shared, "cp.async destination")
        self.check_memory(s.src, kir.Memory.global_, "cp.async source")
        if s.src.dtype is not s.dst.dtype:
            raise self.error(f"cp.async from {s.src.dtype} {s.src.name} into {s.dst.dtype} "
                             f"{s.dst.name} (a copy does not convert)")
        size = s.dst.dtype.itemsize
        if s.nbytes % size:
            raise self.error(f"cp.async of {s.nbytes} bytes is not a whole number of "
                             f"{s.dst.dtype} elements")
        off = s.dst.byte_offset
        if isinstance(off, kir.Const) and int(off.value) % s.nbytes:
            raise self.error(f"shared buffer {s.dst.name} at byte {off.value} is not aligned "
                             f"to {s.nbytes}-byte copies")
        for role, index in (("destination", s.dst_index), ("source", s.src_index)):
            if isinstance(index, kir.Const) and int(index.value) * size % s.nbytes:
                raise self.error(f"cp.async {role} element {index.value} is not aligned to "
                                 f"{s.nbytes} bytes")
        self.need("smem_addr")
        dst = f"smem_addr(&{self.subscript(s.dst, s.dst_index)})"
        src = f"gmem_addr(&{self.subscript(s.src, s.src_index)})"
        src_size = None
        if s.src_size is not None:
            if s.src_size.dtype not in _INT:
                raise self.error(f"cp.async src-size {_where(s.src_size)} is "
                                 f"{s.src_size.dtype}, not an integer")
            if isinstance(s.src_size, kir.Const) and not 0 <= int(s.src_size.value) <= s.nbytes:
                raise self.error(f"cp.async src-size {s.src_size.value} is not in "
                                 f"[0, {s.nbytes}]")
            src_size = self.expr(s.src_size)
        self.emit_lines(depth, ptx.cp_async(s.cache, s.nbytes, dst, src, src_size),
                        self.describe(s))

    def s_CpAsyncCommit(self, s, depth):
        self.emit(depth, ptx.cp_async_commit(), s.label)

    def s_CpAsyncWait(self, s, depth):
        n = s.n
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise self.error(f"cp.async.wait_group takes a non-negative int, got {n!r}")
        sid = s.sync_id or "wait"
        for reason in s.reasons:
            self.emit(depth, f"// {sid}: {_comment_safe(str(reason))}")
        tag = f"{s.label} {s.sync_id}" if s.sync_id else s.label
        self.emit(depth, ptx.cp_async_wait(n), tag)

    # -- grid synchronization (fences and semaphores) -----------------------------------
    def s_Fence(self, s, depth):
        self.emit(depth, ptx.fence(), self.describe(s))

    def semaphore(self, s, what):
        """`&sem[index]` and the i32 value of a SemWait / SemRelease."""
        self.check_memory(s.sem, kir.Memory.global_, f"{what} semaphore")
        if s.sem.dtype is not DataType.i32:
            raise self.error(f"{what} semaphore {s.sem.name} is {s.sem.dtype}, not i32")
        if s.index is None or s.value is None:
            raise self.error(f"{what} needs an index and a value")
        if s.value.dtype not in _INT:
            raise self.error(f"{what} value {_where(s.value)} is {s.value.dtype}, not an "
                             "integer")
        value = self.expr(s.value)
        if s.value.dtype is not DataType.i32:
            value = f"(i32){value}"
        self.need("grid_sync")
        return f"&{self.subscript(s.sem, s.index)}", _bare(value)

    def s_SemWait(self, s, depth):
        cell, value = self.semaphore(s, "sem_wait")
        self.emit(depth, f"sem_wait({cell}, {value});", self.describe(s))

    def s_SemRelease(self, s, depth):
        cell, value = self.semaphore(s, "sem_release")
        self.emit(depth, f"sem_release({cell}, {value});", self.describe(s))

    # -- expressions ---------------------------------------------------------------------
    def subscript(self, buffer, index):
        if index.dtype not in _INT:
            raise self.error(f"index {_where(index)} of {buffer.name} is {index.dtype}, "
                             "not an integer")
        return f"{self.ident(buffer)}[{_bare(self.expr(index))}]"

    def expr(self, e):
        """C text of `e`: an identifier, literal, call, subscript or parenthesized
        expression, so that it can stand as the operand of any operator."""
        method = getattr(self, f"e_{type(e).__name__}", None)
        if method is None:
            raise self.error(f"the CUDA emitter has no rule for {type(e).__name__}")
        return method(e)

    def e_Const(self, e):
        return _literal(e.value, e.dtype, self)

    def e_Var(self, e):
        return self.ident(e)

    def e_Special(self, e):
        if e.axis not in ("x", "y", "z") or not isinstance(e.kind, kir.SpecialKind):
            raise self.error(f"bad special {e!r}")
        if e.dtype not in _INT:
            raise self.error(f"{e.name} must have an integer dtype, got {e.dtype}")
        # threadIdx.x is unsigned: the cast keeps index math signed and in the index type
        return f"({C_TYPES[e.dtype]}){e.kind.value}.{e.axis}"

    def e_Load(self, e):
        if e.width != 1:
            raise self.error(f"a vector load of {e.buffer.name} outside a vector store")
        return self.subscript(e.buffer, e.index)

    def e_Select(self, e):
        if e.cond.dtype is not DataType.bool:
            raise self.error(f"select condition {_where(e.cond)} is not bool")
        if e.a.dtype is not e.dtype or e.b.dtype is not e.dtype:
            raise self.error(f"select {_where(e)} of {e.a.dtype}/{e.b.dtype} values is "
                             f"typed {e.dtype}")
        return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"

    def e_ShuffleXor(self, e):
        mask = e.lane_mask
        if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < 32:
            raise self.error(f"shuffle lane mask must be an int in [0, 32), got {mask!r}")
        v = self.expr(e.value)
        t = e.dtype
        if t in (DataType.f32, DataType.f64, DataType.i32, DataType.i64):
            return f"__shfl_xor_sync(0xffffffffu, {_bare(v)}, {mask})"
        if t is DataType.bool:
            return f"(__shfl_xor_sync(0xffffffffu, (i32){v}, {mask}) != 0)"
        self.need(f"shfl_{t.value}")
        return f"shfl_xor_{t.value}({_bare(v)}, {mask})"

    def e_UnOp(self, e):
        op, t, a = e.op, e.dtype, e.a
        if a.dtype is not t:
            raise self.error(f"{op} of a {a.dtype} operand is typed {t} (lowering must "
                             f"Cast): {_where(e)}")
        x = self.expr(a)
        if op == "not":
            if t is not DataType.bool:
                raise self.error(f"not on {t} (only bool): {_where(e)}")
            return f"(!{x})"
        if op in ("neg", "abs", "relu"):
            if t not in _ARITH:
                raise self.error(f"{op} on {t}: {_where(e)}")
            if op == "neg":
                return f"(-{x})"
            if op == "abs":
                if t is DataType.i32:
                    return f"abs({_bare(x)})"
                if t is DataType.i64:
                    return f"llabs({_bare(x)})"
                return f"{_MATH['abs'][t is DataType.f64]}({_bare(x)})"
            self.need(f"relu_{t.value}")
            return f"relu_{t.value}({_bare(x)})"
        if op not in kir.UNARY_OPS:
            raise self.error(f"unknown unary op {op!r}")
        if t not in _FLOAT:
            raise self.error(f"{op} on {t} (f32 or f64 only; lowering computes f16/bf16 "
                             f"in f32): {_where(e)}")
        if op in _MATH:
            return f"{_MATH[op][t is DataType.f64]}({_bare(x)})"
        self.need(f"{op}_{t.value}")
        return f"{op}_{t.value}({_bare(x)})"

    def e_BinOp(self, e):
        op, t, a, b = e.op, e.dtype, e.a, e.b
        if op not in kir.BINARY_OPS:
            raise self.error(f"unknown binary op {op!r}")
        if a.dtype is not b.dtype:
            raise self.error(f"{op} of {a.dtype} and {b.dtype} operands (lowering must "
                             f"Cast): {_where(e)}")
        operand = a.dtype
        if op in kir.COMPARISONS or op in ("and", "or"):
            if t is not DataType.bool:
                raise self.error(f"{op} must be typed bool, got {t}: {_where(e)}")
            if op in ("and", "or") and operand is not DataType.bool:
                raise self.error(f"{op} of {operand} operands (bool only): {_where(e)}")
            if op in kir.COMPARISONS and operand in _HALF:
                raise self.error(f"{op} of {operand} operands (compare in f32): {_where(e)}")
            return f"({self.expr(a)} {_INFIX[op]} {self.expr(b)})"
        if operand is not t:
            raise self.error(f"{op} of {operand} operands is typed {t}: {_where(e)}")
        if t not in _ARITH:
            raise self.error(f"{op} on {t} (arithmetic is on i32, i64, f32, f64; lowering "
                             f"computes f16/bf16 in f32): {_where(e)}")
        x, y = self.expr(a), self.expr(b)
        if op in ("min", "max"):
            self.need(f"{op}_{t.value}")
            return f"{op}_{t.value}({_bare(x)}, {_bare(y)})"
        if op == "ceildiv":
            if t not in _INT:
                raise self.error(f"ceildiv on {t}: {_where(e)}")
            one = "1LL" if t is DataType.i64 else "1"
            return self.int_division("div", f"({x} + {y} - {one})", y, b)
        if op == "xor" and t not in _INT:
            raise self.error(f"xor on {t} (integers only): {_where(e)}")
        if op == "mod" and t in _FLOAT:
            return f"{'fmod' if t is DataType.f64 else 'fmodf'}({_bare(x)}, {_bare(y)})"
        if op in ("div", "mod") and t in _INT:
            return self.int_division(op, x, y, b)
        return f"({x} {_INFIX[op]} {y})"

    def int_division(self, op, x, y, divisor):
        """C's / or % where the divisor is a constant other than 0 and -1 (index
        arithmetic), else the preamble's div_/mod_, which define the results C leaves
        undefined (fuserir.numerics)."""
        if isinstance(divisor, kir.Const) and int(divisor.value) not in (0, -1):
            return f"({x} {_INFIX[op]} {y})"
        name = f"{op}_{divisor.dtype.value}"
        self.need(name)
        return f"{name}({_bare(x)}, {_bare(y)})"

    def e_Cast(self, e):
        src, dst = e.a.dtype, e.dtype
        x = self.expr(e.a)
        if src is dst:
            return x
        self.type_of(src)
        self.type_of(dst)
        if src in _HALF:                       # exact in f32, then onwards
            x = f"{src.value}_to_f32({_bare(x)})"
            src = DataType.f32
            if dst is DataType.f32:
                return x
        if dst is DataType.bool:
            zero = {DataType.f32: "0.0f", DataType.f64: "0.0", DataType.i64: "0LL"}.get(
                src, "0")
            return f"({x} != {zero})"
        if dst in _HALF:
            if src is DataType.bool:
                return f"f32_to_{dst.value}((f32){x})"
            return f"{src.value}_to_{dst.value}({_bare(x)})"
        if src in _FLOAT and dst in _INT:      # saturating, NaN -> 0: PTX cvt.rzi
            self.need(f"{src.value}_to_{dst.value}")
            return f"{src.value}_to_{dst.value}({_bare(x)})"
        return f"({C_TYPES[dst]}){x}"      # an operand anywhere but before [ or .


def _bare(text):
    """`text` without one pair of parentheses enclosing all of it (where an expression
    stands alone: a statement's right-hand side, a subscript, a call argument)."""
    if not text.startswith("("):
        return text
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[1:-1] if i == len(text) - 1 else text
    return text


def _comment_safe(text):
    # A backslash ending a // comment would splice the next source line into it.
    text = str(text).replace("\r", " ")
    return text + "." if text.endswith("\\") else text
