"""linear (x @ weight^T + bias, torch.nn.functional.linear): what it is made of, and its
refusals, each naming the problem and where."""

import pytest

import fuserir
from fuserir import DslError


def test_linear_is_a_tn_matmul_with_the_bias_added_in_f32_and_rounded_once():
    fusion = fuserir.parse("fusion f(x: bf16[M, K], w: bf16[N, K], b: bf16[N]) {\n"
                           "  y = linear(x, w, b)\n  output y\n}")
    assert fuserir.print_fusion(fusion).splitlines()[1] == \
        "  y = cast(matmul(x, w, layout=TN) + broadcast(cast(b, f32), [true, false]), bf16)"
    fusion = fuserir.parse("fusion f(x: f16[M, K], w: f16[N, K]) {\n"
                           "  y = linear(x, w)\n  output y\n}")
    assert fuserir.print_fusion(fusion).splitlines()[1] == \
        "  y = cast(matmul(x, w, layout=TN), f16)"


@pytest.mark.parametrize("params, call, message", [
    ("x: bf16[M, K], w: bf16[N, K], b: bf16[M]", "linear(x, w, b)",
     "linear: bias (b) must be [N], one value per row of weight (w), is [M]"),
    ("x: bf16[M, K], w: bf16[N, K], b: i32[N]", "linear(x, w, b)",
     "linear: bias (b) is i32; it must be a float"),
    ("x: bf16[K], w: bf16[N, K]", "linear(x, w)",
     "linear: x (x) must have at least 2 axes, has 1"),
    ("x: bf16[M, K], w: bf16[K]", "linear(x, w)",
     "linear: weight (w) must have 2 axes, has 1"),
    ("x: bf16[B, M, K], w: bf16[B, N, K]", "linear(x, w)",
     "linear: weight (w) must have 2 axes, has 3"),
    ("x: bf16[M, K], w: bf16[N, J]", "linear(x, w)",
     "linear: x (x) has rows of K but weight (w) rows of J: they must be equal (K)"),
    ("x: f32[M, K], w: f32[N, K]", "linear(x, w)",
     "linear: x (x) must be f16 or bf16 (the tensor cores' operands), got f32"),
    ("x: bf16[M, K], w: f16[N, K]", "linear(x, w)",
     "matmul: A (x) is bf16 but B (w) is f16"),
])
def test_linear_refusals(params, call, message):
    with pytest.raises(DslError) as caught:
        fuserir.parse(f"fusion f({params}) {{\n  y = {call}\n  output y\n}}")
    assert message in str(caught.value)
    assert (caught.value.line, caught.value.column) == (2, 7)
