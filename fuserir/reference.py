"""The reference evaluator: what a fusion means, computed with numpy.

This is the ground truth every backend is tested against. It evaluates expressions in
topological order on host arrays and ignores loop schedules, except where a schedule
rewrote the graph: an rfactor producer is evaluated as the partial reduction its logical
domain describes (the reduction split into pieces, some reduced here, the rest by its
consumer), so that a schedule can be checked not to change meaning.

Numerics: arithmetic on f16/bf16 is carried out in f32 and rounded to the result type
after every operation, as generated code does; math functions are computed in f64 (from
an integer operand converted to f32, as generated code converts it) and rounded once
(each op's kind and meaning: fuserir.op_table); reductions and matmul accumulate in f64
and round once to their output type (a closer answer than any f32 accumulation order).
Casts, integer division and empty reductions mean what fuserir.numerics defines, for
every backend alike:
  * a cast float -> integer truncates toward zero and saturates (+-inf and values past
    the range give the type's minimum or maximum), NaN gives 0 (PTX cvt.rzi); integer ->
    integer wraps; to bool is != 0; to a narrower float rounds to nearest even once;
  * integer division truncates toward zero, as in C; a / 0 = 0 and MIN / -1 = MIN (C
    leaves both undefined); a literal zero divisor is refused when the fusion is built;
  * a reduction over no elements gives its identity: sum 0, max -inf (floats) or the
    type's minimum (integers).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from . import dtypes, numerics, op_table
from .dtypes import DataType
from .errors import EvaluationError
from .ir import extent as ext
from .ir.exprs import (AxisIndexOp, BinaryOp, BroadcastOp, CastOp, CatOp, ExpandOp, FullOp,
                       LoadStoreOp, MatmulOp, PadOp, PermuteOp, ReductionOp, ReshapeOp,
                       SliceOp, SqueezeOp, UnaryOp, WhereOp)
from .ir.iterdomain import Split, history
from .ir.tensor import Scalar

if TYPE_CHECKING:
    from .ir.fusion import Fusion



def evaluate(fusion: Fusion, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Evaluate `fusion` on `inputs` ({name: array}, plus {name: int} for named run-time
    scalars such as a split factor); returns {output name: numpy array}."""
    arrays, env = bind_inputs(fusion, host_scalars(fusion, inputs))
    values = dict(arrays)
    for expr in fusion.exprs:
        for size in (v for v in expr.inputs if isinstance(v, Scalar) and v.is_size):
            # a size as a value: its integer, converted as generated code converts it
            values[size] = numerics.convert(np.int64(ext.evaluate(size.value, env)),
                                            size.dtype)
        values[expr.output] = _evaluate_expr(expr, values, env)
    return {t.name: values[t] for t in fusion.outputs}


def host_scalars(fusion, inputs):
    """`inputs` with each Python number given for a rank-0 input (a host scalar: a bool,
    int or float) as a 0-d numpy array of that input's dtype. Refused, naming the input: a
    complex number, a fraction or an out-of-range integer for an integer input, a finite
    float past a float dtype's range, a number other than 0 or 1 for a bool input."""
    converted = dict(inputs)
    for tv in fusion.inputs:
        value = inputs.get(tv.name)
        if tv.rank or isinstance(value, np.ndarray) or not isinstance(
                value, (bool, int, float, complex, np.number, np.bool_)):
            continue
        if isinstance(value, (complex, np.complexfloating)):
            raise EvaluationError(f"input {tv.name}: {value!r} is complex; fuserir has no "
                                  "complex dtype")
        dtype, number = tv.dtype, value.item() if hasattr(value, "item") else value
        if dtype is DataType.bool:
            fits = number in (0, 1)
        elif dtype.is_int:
            info = np.iinfo(dtype.numpy)
            fits = float(number).is_integer() and info.min <= number <= info.max
        else:
            with np.errstate(over="ignore"):
                fits = not math.isfinite(number) or bool(np.isfinite(
                    np.float64(number).astype(dtype.numpy)))
        if not fits:
            raise EvaluationError(f"input {tv.name}: {number!r} is not a value of its dtype "
                                  f"{dtype}")
        converted[tv.name] = np.asarray(number).astype(dtype.numpy)
    return converted


def bind_inputs(fusion, inputs, convert=None):
    """Check `inputs` against the fusion's inputs (names, dtypes, ranks, sizes) and bind
    its size symbols and run-time scalars (a declared scalar not passed takes its default;
    a name that is neither an input nor declared is refused, listing what is). Returns ({input tensor: array}, {symbol: int}). Arrays are converted
    with `convert` (default: to numpy); the backends pass their own."""
    convert = convert or to_numpy
    names = {t.name for t in fusion.inputs}
    env, arrays = {}, {}
    origin = {}  # symbol -> where its value came from, for error messages
    scalars = set(fusion.scalars) | set(fusion.size_symbols())
    for name, value in inputs.items():
        if name in names:
            continue
        if name not in scalars and hasattr(value, "shape"):
            raise EvaluationError(f"'{name}' is not an input of fusion {fusion.name} "
                                  f"(inputs: {', '.join(sorted(names))})")
        if name not in scalars:
            raise EvaluationError(f"'{name}' is neither an input nor a run-time scalar of "
                                  f"fusion {fusion.name} ({fusion.describe_run_time()})")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise EvaluationError(f"run-time scalar '{name}' must be an integer, got "
                                  f"{value!r}")
        if value < 1:
            raise EvaluationError(f"run-time scalar '{name}' must be >= 1, got {value}")
        env[name] = int(value)
        origin[name] = f"the value passed for {name}"
    for name, default in fusion.scalars.items():
        if default is not None:
            env.setdefault(name, default)
    for tv in fusion.inputs:
        if tv.name not in inputs:
            raise EvaluationError(f"missing input '{tv.name}' of fusion {fusion.name}")
        array = convert(inputs[tv.name])
        have = dtypes.from_numpy(array.dtype)
        if have is not tv.dtype:
            raise EvaluationError(f"input {tv.name}: expected {tv.dtype}, got {array.dtype}")
        if array.ndim != tv.rank:
            raise EvaluationError(f"input {tv.name}: expected {tv.rank} dimensions, got "
                                  f"{array.ndim}")
        for i, (extent, size) in enumerate(zip(tv.shape, array.shape)):
            if isinstance(extent, int):
                if extent != size:
                    raise EvaluationError(f"input {tv.name}: axis {i} must have size "
                                          f"{extent}, got {size}")
            elif isinstance(extent, ext.Sym):
                bound = env.setdefault(extent.name, size)
                origin.setdefault(extent.name, f"input {tv.name} axis {i}")
                if bound != size:
                    raise EvaluationError(f"input {tv.name}: axis {i} is {extent.name} = "
                                          f"{size}, but {extent.name} = {bound} from "
                                          f"{origin[extent.name]}")
        arrays[tv] = array
    check_requirements(fusion, env)
    return arrays, env


def check_requirements(fusion, env):
    """Refuse sizes that break one of the fusion's requirements (Fusion.require): a slice
    bound past its axis, say, which only the bound sizes show."""
    for lhs, rhs, what in fusion.requirements:
        if not (ext.symbols(lhs) | ext.symbols(rhs)) <= set(env):
            continue     # a scalar with no value yet: whoever needs it says so
        a, b = ext.evaluate(lhs, env), ext.evaluate(rhs, env)
        if a > b:
            values = " and ".join(f"{e} = {v}" for e, v in ((lhs, a), (rhs, b))
                                  if not isinstance(e, int))
            raise EvaluationError(f"{what}: needs {lhs} <= {rhs}, but {values} here")


def to_numpy(value):
    """A host numpy array from a numpy, CuPy or torch array."""
    if hasattr(value, "get") and type(value).__module__.startswith("cupy"):
        return value.get()
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _extent(e, env, tv):
    try:
        return ext.evaluate(e, env)
    except KeyError as missing:
        raise EvaluationError(f"tensor {tv.name}: extent {e} needs a value for "
                              f"'{missing.args[0]}'; pass it in the inputs") from None


# -- expressions ---------------------------------------------------------------------------


def _operand(v, values, dtype):
    """An operand as an array of `dtype`'s compute type (a literal is first rounded to its
    own dtype, which it takes from the tensor beside it)."""
    if isinstance(v, Scalar) and not v.is_size:
        return np.asarray(v.value, dtype=v.dtype.numpy).astype(dtype.compute.numpy)
    return np.asarray(values[v]).astype(dtype.compute.numpy)


def _round(array, dtype):
    """A float result rounded once to `dtype` (past its range: inf, as IEEE rounds)."""
    with np.errstate(over="ignore"):
        return np.asarray(array).astype(dtype.numpy)


def _evaluate_expr(expr, values, env):
    out = expr.output
    if isinstance(expr, UnaryOp):
        return _unary(expr, values)
    if isinstance(expr, BinaryOp):
        return _binary(expr, values)
    if isinstance(expr, WhereOp):
        cond, a, b = expr.inputs
        return _round(np.where(values[cond], _operand(a, values, out.dtype),
                               _operand(b, values, out.dtype)), out.dtype)
    if isinstance(expr, CastOp):
        return _cast(values[expr.inputs[0]], out.dtype)
    if isinstance(expr, LoadStoreOp):
        return values[expr.inputs[0]].copy()
    if isinstance(expr, BroadcastOp):
        x = values[expr.inputs[0]]
        new_axes = [i for i, is_new in enumerate(expr.flags) if is_new]
        return np.expand_dims(x, tuple(new_axes)) if new_axes else x.copy()
    if isinstance(expr, AxisIndexOp):
        shape = values[expr.inputs[0]].shape
        along = np.arange(shape[expr.dim]).reshape([-1 if d == expr.dim else 1
                                                    for d in range(len(shape))])
        return np.broadcast_to(along, shape).astype(np.int64)
    if isinstance(expr, PermuteOp):
        return np.transpose(values[expr.inputs[0]], expr.dims).copy()
    if isinstance(expr, SqueezeOp):
        return np.squeeze(values[expr.inputs[0]], axis=expr.dims).copy()
    if isinstance(expr, ExpandOp):
        shape = [ext.evaluate(a.extent, env) for a in out.root]
        return np.broadcast_to(values[expr.inputs[0]], shape).copy()
    if isinstance(expr, SliceOp):
        index = tuple(slice(ext.evaluate(a, env), ext.evaluate(b, env), step)
                      for a, b, step in zip(expr.starts, expr.ends, expr.steps))
        return values[expr.inputs[0]][index].copy()
    if isinstance(expr, PadOp):
        widths = [(ext.evaluate(a, env), ext.evaluate(b, env)) for a, b in expr.widths]
        fill = _operand(expr.inputs[1], values, out.dtype).astype(out.dtype.numpy)
        return np.pad(values[expr.inputs[0]], widths, constant_values=fill)
    if isinstance(expr, ReshapeOp):
        shape = [ext.evaluate(a.extent, env) for a in out.logical]
        return np.reshape(values[expr.inputs[0]], shape).copy()
    if isinstance(expr, CatOp):
        return np.concatenate([values[t] for t in expr.inputs], axis=expr.dim)
    if isinstance(expr, FullOp):
        shape = [ext.evaluate(a.extent, env) for a in out.root]
        return np.full(shape, _operand(expr.inputs[0], values, out.dtype),
                       dtype=out.dtype.numpy)
    if isinstance(expr, ReductionOp):
        return _reduction(expr, values, env)
    if isinstance(expr, MatmulOp):
        return _matmul(expr, values, env)
    raise NotImplementedError(type(expr).__name__)  # every Expr subclass is handled above


def _cast(x, dtype):
    return np.asarray(numerics.convert(x, dtype))


def _unary(expr, values):
    x, out = expr.inputs[0], expr.output
    entry = op_table.UNARY[op_table.kernel_unary(expr.op, expr.approximate)]
    operand = _operand(x, values, op_table.fusion_types(entry, x.dtype)[0])
    if entry.kind in ("math", "predicate"):
        return _round(op_table.math_unary(entry.name, operand), out.dtype)
    return _round(entry.meaning(operand), out.dtype)


def _binary(expr, values):
    a, b = expr.inputs
    entry = op_table.FUSION_BINARY[expr.op]
    operand_dtype = op_table.fusion_types(entry, dtypes.promote(a.dtype, b.dtype))[0]
    x, y = np.broadcast_arrays(_operand(a, values, operand_dtype),
                               _operand(b, values, operand_dtype))
    if entry.kind == "math" and operand_dtype.is_float:
        result = op_table.math_binary(entry.name, x, y)
    else:
        with np.errstate(all="ignore"):
            result = (entry.integer if operand_dtype.is_int else entry.meaning)(x, y)
    return _round(result, expr.output.dtype)


# -- reductions: plain, and the partial reduction of an rfactor producer -------------------


def _accumulator(dtype):
    return DataType.f64 if dtype.is_float else dtype


# numpy's reductions propagate NaN, as the kernels' combining ops do (fuserir.numerics)
# (welford states merge exactly, rounded once: numerics.welford_reduce)
_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
           "welford_merge": lambda a, axis, initial: numerics.welford_reduce(a, axis)}


def _reduction(expr, values, env):
    x = values[expr.inputs[0]]
    out = expr.output
    acc_dtype = _accumulator(expr.inputs[0].dtype)
    identity = numerics.identity(expr.op, acc_dtype)       # what no elements reduce to
    acc = x.astype(acc_dtype.numpy)

    def reduce(a, axis):
        with np.errstate(all="ignore"):     # a product may overflow to inf, as on the GPU
            return _REDUCE[expr.op](a, axis=axis, initial=identity)

    if out.logical == out.root:
        # The root says what is reduced: an rfactor producer whose rfactored axes were not
        # transformed keeps its other reduction roots as iteration axes.
        axes = tuple(i for i, r in enumerate(out.root) if r.is_reduction)
        return _round(reduce(acc, axes), out.dtype)
    # rfactor producer: gather the reduction's root indices for each logical piece.
    gathered, kept, reduced = _gather_pieces(out, acc, env, identity)
    return _round(_to_logical_order(out, reduce(gathered, tuple(reduced)), kept),
                  out.dtype)


def _matmul(expr, values, env):
    a_tv, b_tv = expr.inputs
    a = values[a_tv].astype(np.float64)
    b = values[b_tv].astype(np.float64)
    a = a if expr.layout[0] == "T" else np.swapaxes(a, -1, -2)   # [batch.., M, K]
    b = b if expr.layout[1] == "T" else np.swapaxes(b, -1, -2)   # [batch.., K, N]
    out = expr.output
    if out.logical == out.root:
        return _round(np.matmul(a, b), out.dtype)
    pieces = _pieces(out)
    index, valid = _piece_indices(out, pieces, env)
    k_index = next(iter(index.values()))
    a_g = np.where(valid, a[..., :, k_index], 0.0)                 # [batch.., M, *pieces]
    b_g = b[..., k_index, :]                                       # [batch.., *pieces, N]
    b_g = np.moveaxis(b_g, -1, b_g.ndim - len(pieces) - 1)         # [batch.., N, *pieces]
    letters = "abcdefghijklmnopqrstuvw"[:len(pieces)]
    kept = "".join(c for c, p in zip(letters, pieces) if not p.is_reduction)
    result = np.einsum(f"...y{letters},...z{letters}->...yz{kept}", a_g, b_g)
    return _round(_to_logical_order(out, result, [p for p in pieces if not p.is_reduction]),
                  out.dtype)


def _pieces(tv):
    """The logical axes of an rfactor producer that come from its reduction: the pieces its
    schedule split the reduction into, and reduction roots it reduces untransformed."""
    return [a for a in tv.logical if a not in tv.root or a.is_reduction]


def _piece_indices(tv, pieces, env):
    """Root indices (per reduction root axis) of every combination of piece indices, and
    which combinations are in range (non-divisible splits leave some out)."""
    shape = [_extent(p.extent, env, tv) for p in pieces]
    grids = np.indices(shape) if shape else np.zeros((0,), dtype=np.int64)
    index = {p: grids[i] for i, p in enumerate(pieces)}
    valid = np.ones(shape, dtype=bool)
    for t in reversed(history(pieces)):
        if isinstance(t, Split):
            inner_extent = _extent(t.inner.extent, env, tv)
            index[t.input] = index[t.outer] * inner_extent + index[t.inner]
            valid &= index[t.input] < _extent(t.input.extent, env, tv)
        else:
            inner_extent = _extent(t.inner.extent, env, tv)
            index[t.outer] = index[t.output] // inner_extent
            index[t.inner] = index[t.output] % inner_extent
    roots = {r: np.where(valid, index[r], 0) for r in tv.root if r in index}
    return roots, valid


def _gather_pieces(tv, acc, env, identity):
    """Rearrange a reduction's input (shaped like tv.root) into [iteration roots..., pieces...]
    with out-of-range combinations set to `identity`; returns (array, kept pieces, axes of
    the array to reduce)."""
    pieces = _pieces(tv)
    index, valid = _piece_indices(tv, pieces, env)
    iteration = [i for i, r in enumerate(tv.root) if not r.is_reduction]
    reduction = [i for i, r in enumerate(tv.root) if r.is_reduction]
    moved = np.moveaxis(acc, iteration + reduction, list(range(acc.ndim)))
    lead = (slice(None),) * len(iteration)
    gathered = moved[lead + tuple(index[tv.root[i]] for i in reduction)]
    gathered = np.where(valid, gathered, np.asarray(identity, dtype=acc.dtype))
    reduced = [len(iteration) + i for i, p in enumerate(pieces) if p.is_reduction]
    return gathered, [p for p in pieces if not p.is_reduction], reduced


def _to_logical_order(tv, array, kept_pieces):
    """`array` is laid out [iteration roots..., kept pieces...]; permute it into the order of
    tv's shape axes."""
    layout = [r for r in tv.root if not r.is_reduction] + kept_pieces
    return np.transpose(array, [layout.index(a) for a in tv.shape_axes])

