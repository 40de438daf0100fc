"""The emitter's state, the C identifiers of kernel IR names and the C text of kernel IR
expressions: ExpressionEmitter is the base of codegen.cuda.emitter's _Emitter, which
adds the kernel's signature and statements and calls expr() for every expression in
them. Constants are spelled by codegen.cuda.literals, names by codegen.cuda.names.

Types are spelled as kernel IR spells them (`i32`, `i64`, `f32`, `f64`, `f16`, `bf16`,
`bool`) through typedefs, so a CUDA line reads like its kernel IR line. Kernel IR is
explicitly typed and the emitter trusts no implicit C conversion: every operand must
already have the type its node computes in (a violation is a lowering bug, reported as
CodegenError naming the expression), and each Cast becomes an explicit C cast or a
preamble conversion. f16/bf16 never take part in arithmetic; they are converted through
f32 (exactly) or with round-to-odd where a direct PTX cvt needs sm_90.

Semantics chosen where C leaves a choice: min/max propagate NaN and relu keeps it (as
numpy's minimum/maximum do; fminf/fmaxf would drop it); `mod` on floats is fmod (the sign
of the dividend, like C's %); `not` is logical and takes bool only; `bitnot` of a bool
is `!` (C's ~ would make true -2, still true); ceildiv is (a + b - 1) / b. Where C's
behaviour is undefined, fuserir.numerics and the op table define it and the emitter spells
it out: a float -> integer cast is PTX cvt.rzi (saturating, NaN -> 0; preamble f32_to_i32
...), an integer / or % whose divisor is not a constant other than 0 and -1 goes through
the preamble's div_i32 / mod_i32 (a / 0 = 0, a % 0 = a, MIN / -1 = MIN), and shifts and
integer pow through the op table's shl_i32, pow_i32, ... NVRTC's default --fmad=true may
contract an f32 `a * b + c` into one fma: results equal the interpreter's separately
rounded ones wherever the product is exact (integer-valued data), and are within rounding
elsewhere.
"""

from fuserir import op_table
from fuserir.dtypes import DataType
from lowering import kir

from ..errors import CodegenError
from .literals import _literal
from .names import _ARITH, _FLOAT, _HALF, _IDENT, _INT, _RESERVED, C_TYPES, mangle

# C operators of the binary ops that have one (fuserir.op_table)
_INFIX = {name: op.infix for name, op in op_table.BINARY.items() if op.infix}


def _where(expr):
    try:
        return kir.format_expr(expr)
    except Exception:          # noqa: BLE001 - a malformed node still gets a message
        return type(expr).__name__


class ExpressionEmitter:
    """The state of one kernel's emission, its identifiers and its expressions."""

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
        for m in k.tensor_maps:
            if isinstance(m, kir.TensorMap) and m.user:     # the signature checks the rest
                self.ident(m)

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

    def type_of(self, dtype):
        if dtype not in C_TYPES:
            raise self.error(f"unknown dtype {dtype!r}")
        if dtype in _HALF or dtype.is_state:
            self.need(dtype.value)
        return C_TYPES[dtype]

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
        self.need(f"shfl_{t.value}" if t in _HALF else self.type_of(t))
        return f"shfl_xor_{t.value}({_bare(v)}, {mask})"

    def e_UnOp(self, e):
        op, t, a = e.op, e.dtype, e.a
        entry = op_table.UNARY.get(op)
        if entry is None:
            raise self.error(f"unknown unary op {op!r}")
        operand = a.dtype
        if op_table.result_type(entry, operand) is not t:
            raise self.error(f"{op} of a {operand} operand is typed {t} (lowering must "
                             f"Cast): {_where(e)}")
        x = self.expr(a)
        if entry.kind == "state":
            self.type_of(operand)
            return f"{op}({_bare(x)})"
        if entry.kind == "logical":
            if operand is not DataType.bool:
                raise self.error(f"not on {operand} (only bool): {_where(e)}")
            return f"(!{x})"
        if entry.kind == "bitwise":
            if operand is DataType.bool:           # ~ of a bool would be -1 or -2
                return f"(!{x})"
            if operand not in _INT:
                raise self.error(f"{op} on {operand} (integers or bool): {_where(e)}")
            return f"(~{x})"
        if entry.kind == "exact":
            if t not in _ARITH:
                raise self.error(f"{op} on {t}: {_where(e)}")
            if op == "neg":
                return f"(-{x})"
            if op == "abs":
                if t is DataType.i32:
                    return f"abs({_bare(x)})"
                if t is DataType.i64:
                    return f"llabs({_bare(x)})"
                return f"{entry.builtin[t is DataType.f64]}({_bare(x)})"
            self.need(f"relu_{t.value}")
            return f"relu_{t.value}({_bare(x)})"
        if operand not in _FLOAT:
            raise self.error(f"{op} on {operand} (f32 or f64 only; lowering computes f16/bf16 "
                             f"in f32): {_where(e)}")
        if entry.builtin:
            return f"{entry.builtin[operand is DataType.f64]}({_bare(x)})"
        self.need(f"{op}_{operand.value}")
        return f"{op}_{operand.value}({_bare(x)})"

    def e_BinOp(self, e):
        op, t, a, b = e.op, e.dtype, e.a, e.b
        entry = op_table.BINARY.get(op)
        if entry is None:
            raise self.error(f"unknown binary op {op!r}")
        if a.dtype is not b.dtype:
            raise self.error(f"{op} of {a.dtype} and {b.dtype} operands (lowering must "
                             f"Cast): {_where(e)}")
        operand = a.dtype
        if entry.kind in ("compare", "logical"):
            if t is not DataType.bool:
                raise self.error(f"{op} must be typed bool, got {t}: {_where(e)}")
            if entry.kind == "logical" and operand is not DataType.bool:
                raise self.error(f"{op} of {operand} operands (bool only): {_where(e)}")
            if operand in _HALF:
                raise self.error(f"{op} of {operand} operands (compare in f32): {_where(e)}")
            return f"({self.expr(a)} {_INFIX[op]} {self.expr(b)})"
        if operand is not t:
            raise self.error(f"{op} of {operand} operands is typed {t}: {_where(e)}")
        if entry.kind == "state":
            self.type_of(t)
            return f"{op}({_bare(self.expr(a))}, {_bare(self.expr(b))})"
        if entry.kind == "bitwise" and t is DataType.bool:   # 0 or 1, as an int
            return f"({self.expr(a)} {_INFIX[op]} {self.expr(b)})"
        if t not in _ARITH:
            raise self.error(f"{op} on {t} (arithmetic is on i32, i64, f32, f64; lowering "
                             f"computes f16/bf16 in f32): {_where(e)}")
        if entry.kind in ("integer", "bitwise") and t not in _INT:
            raise self.error(f"{op} on {t} (integers only): {_where(e)}")
        x, y = self.expr(a), self.expr(b)
        if op in ("min", "max"):
            self.need(f"{op}_{t.value}")
            return f"{op}_{t.value}({_bare(x)}, {_bare(y)})"
        if op == "ceildiv":
            one = "1LL" if t is DataType.i64 else "1"
            return self.int_division("div", f"({x} + {y} - {one})", y, b)
        if op in ("div", "mod") and t in _INT:
            return self.int_division(op, x, y, b)
        if entry.builtin and t in _FLOAT:
            return f"{entry.builtin[t is DataType.f64]}({_bare(x)}, {_bare(y)})"
        if entry.preamble and t.value in entry.preamble:
            self.need(f"{op}_{t.value}")
            return f"{op}_{t.value}({_bare(x)}, {_bare(y)})"
        if entry.infix is None:
            raise self.error(f"{op} on {t}: {_where(e)}")
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
        if src.is_state or (dst.is_state and src not in (*_HALF, *_FLOAT)):
            raise self.error(f"no cast from {src} to {dst} (a welford state is made of a "
                             f"float, read by welford_mean and welford_m2): {_where(e)}")
        if dst.is_state:
            if src in _HALF:
                x = f"{src.value}_to_f32({_bare(x)})"
            return f"f32_to_welford({_bare(x) if src is not DataType.f64 else f'(f32){x}'})"
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
