"""FusionDefinition: the Python builder, equivalent to the DSL.

    with fuserir.FusionDefinition("bias_relu") as fd:
        x = fd.define_tensor("x", "f32", ["M", "N"])
        b = fd.define_tensor("b", "f32", ["N"])
        y = fd.ops.relu(x + fd.ops.broadcast(b, [True, False]))
        fd.add_output(y, "y")
    y.split(1, 128)            # schedule with the TensorView methods, as in the DSL
    fusion = fd.fusion

It is a thin layer over Fusion and fuserir.ops: the DSL parser builds fusions through the
same calls, so a fusion built either way prints and evaluates the same.
"""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from . import dtypes, ops
from .errors import FusionError
from .ir.fusion import Fusion
from .ir.tensor import TensorView


class FusionDefinition:
    ops = ops

    def __init__(self, name: str = "fusion") -> None:
        self.fusion = Fusion(name)

    def __enter__(self) -> FusionDefinition:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if exc_type is None and not self.fusion.outputs:
            raise FusionError(f"fusion {self.fusion.name} has no outputs; call add_output")
        return False

    def define_tensor(self, name: str, dtype: dtypes.DataType | str,
                      shape: list[int | str]) -> TensorView:
        """An input tensor; `shape` holds ints and names of run-time sizes ("M")."""
        resolved = dtype if isinstance(dtype, dtypes.DataType) else dtypes.from_name(dtype)
        if resolved is None:
            raise FusionError(f"input {name}: unknown dtype {dtype!r}; expected one of "
                              f"{', '.join(dtypes.DTYPE_NAMES)}")
        return self.fusion.new_input(name, resolved, shape)

    def add_output(self, tv: TensorView, name: str | None = None) -> TensorView:
        """Mark `tv` as an output, naming it `name` if given."""
        if name is not None:
            self.fusion.rename(tv, name)
        return self.fusion.add_output(tv)

    def name(self, tv: TensorView, name: str) -> TensorView:
        """Give an intermediate tensor a name (to refer to it in printed schedules)."""
        return self.fusion.rename(tv, name)
