"""User names never clash with generated names, C/CUDA keywords and built-ins, or each other.

Kernel IR keeps the user's names as written (dumps, messages) and tells them apart from
lowering's by key (kir.name_key); the CUDA emitter mangles them (codegen.cuda.mangle) and
the interpreter binds by key. A regression: a size named `i0` shadowed the loop index
`i0` (the interpreter left the output unwritten), and tensors, sizes or fusions named `M`,
`x_stride1`, `NULL`, `int`, `main`, `printf`, `dim3`, `std`, or a size named like a tensor,
failed late in NVRTC or codegen.
"""

import re

import numpy as np

import codegen
import fuserir
from codegen import cuda, nvrtc
from driver import build
from codegen.errors import CompileError
from codegen import launch as launching
from codegen.interp import run_kernel
from lowering import kir

from test_launch_cache import gpu  # noqa: F401 - the fixture: a GPU that records launches

# Names that meet something: generated names of the kernel below (loop indices, strides,
# the reduction's accumulator and scratch, the block reduction's warp index w_s, the
# shared cache, an unnamed intermediate t2), the other roles' names, C/C++ keywords, CUDA
# built-ins and macros, the preamble's helpers and types, and mangled-looking names.
NAMES = ["i0", "i2", "j0", "v0", "w_s", "t2", "M", "N", "x", "y", "x_stride0", "x_stride1",
         "x_cache", "s_acc", "s_scratch", "NULL", "int", "main", "printf", "dim3", "std",
         "threadIdx", "blockIdx", "float", "half", "f16", "smem", "ldm0", "asm",
         "__global__", "__global_", "_Z1f", "size_t", "expf", "x_", "N_s", "f_kernel"]

TEMPLATE = """fusion {f}({x}: f32[{M}, {N}]) {{
  {s} = sum({x}, axes=[1])
  {y} = {x} - broadcast({s}, [false, true])
  output {y}
}}"""
DEFAULT = dict(f="f", x="x", M="M", N="N", s="s", y="y")
ROLES = {"tensor": "x", "intermediate": "s", "size": "N", "fusion": "f"}


CASES = [(role, name) for role in ROLES for name in NAMES
         if not (name in DEFAULT.values() and DEFAULT[ROLES[role]] != name)]


def _run(case, serial):
    """Parse, evaluate and run one case in the interpreter; its kernels' CUDA sources."""
    role, name = case
    names = dict(DEFAULT, f=f"case{serial}")    # one entry point per case (see below)
    names[ROLES[role]] = name
    text = TEMPLATE.format(**names)
    fusion = fuserir.parse(text)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    inputs = {names["x"]: x}
    want = fuserir.evaluate(fusion, inputs)[names["y"]]
    exe = codegen.compile(fusion, backend="interp")
    got = exe.run(inputs)[names["y"]]
    assert np.array_equal(got, want), f"{text}\ngives {got}, the reference {want}"
    _, _, steps = exe.plan_for({names["M"]: 3, names["N"]: 4})
    assert [s.kernel.kir.name for s in steps] == [names["f"]]   # dumps keep the name
    return [s.kernel.source for s in steps]


def test_every_name_in_every_role_compiles_and_runs(monkeypatch):
    """Every case gives the reference's answer in the interpreter and its CUDA compiles
    with NVRTC. The sources are compiled as one program (each case has its own entry
    point, and its preamble a namespace of its own), which saves NVRTC's cost per call,
    and with ptxas at -O0 (names clash in the front end and in PTX symbols, not in the
    optimizer): one call instead of one per case. Where it fails, each source alone names
    the failing cases. (They are not left to the session's end, which would compile them
    one by one.)"""
    monkeypatch.setattr(build, "emit_cuda", cuda.emit_cuda)
    failures, sources = [], {}
    for serial, case in enumerate(CASES):
        try:
            sources[case] = _run(case, serial)
        except Exception as error:   # noqa: BLE001 - collected, every case reported
            failures.append(f"{case}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)
    assert len(CASES) > 120
    # each source in a namespace of its own: its preamble's structs (vector words, ...)
    # are defined once there; the entry points are extern "C", named apart
    program = "\n".join(f"namespace case{i} {{\n{s}\n}}" for i, s in enumerate(
        s for case in CASES for s in sources[case]))
    fast = ("-Xptxas", "-O0")
    try:
        assert nvrtc.compile_to_cubin(program, "names", "sm_90", fast)[:4] == b"\x7fELF"
    except CompileError:
        for case in CASES:
            for source in sources[case]:
                try:
                    nvrtc.compile_to_cubin(source, "case", "sm_90", fast)
                except CompileError as error:
                    failures.append(f"{case}: {error}")
        assert failures, "the cases compile alone but not as one program"
        raise AssertionError("\n".join(failures)) from None


def test_a_size_named_i0_is_not_the_loop_index_i0():
    fusion = fuserir.parse("fusion f(x: f32[i0, N]) {\n  y = sum(x, axes=[1])\n  output y\n}")
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    exe = codegen.compile(fusion, backend="interp")
    assert np.array_equal(exe.run({"x": x})["y"], x.sum(axis=1))
    (step,) = exe.plan_for({"i0": 6, "N": 4})[2]
    text = step.kernel.kir_text
    assert "i32 i0, i32 N" in text and "for i0 in" in text    # both as written
    source = step.kernel.source
    assert "i32 i0_s," in source and "for (i32 i0 = 0;" in source


def test_a_size_named_x_stride1_is_not_the_stride_of_x():
    fusion = fuserir.parse("fusion f(x: f32[M, x_stride1]) {\n  y = x * 2\n  output y\n}")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-1]      # stride -1 elements
    exe = codegen.compile(fusion, backend="interp")
    assert np.array_equal(exe.run({"x": x})["y"], x * 2)


def test_a_size_named_like_a_tensor_is_its_own_argument(gpu):  # noqa: F811
    fusion = fuserir.parse("fusion f(N: f32[M, N]) {\n  y = N + 1\n  output y\n}")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    exe = codegen.compile(fusion, backend="interp")
    assert np.array_equal(exe.run({"N": x})["y"], x + 1)
    kernel = exe.kernels[0].kir
    scalar_n = next(p for p in kernel.scalar_params if p.var.name == "N")
    assert kir.arg_name(kernel, scalar_n) == "scalar:N"
    assert kir.arg_name(kernel, kernel.tensor_params[0]) == "N"
    # the interpreter takes the tensor under N and the size under scalar:N
    y = np.zeros((3, 4), np.float32)
    run_kernel(kernel, {"N": x, "y": y, "M": 3, "scalar:N": 4})
    assert np.array_equal(y, x + 1)
    # and so does the launcher: the size 4 is passed, not the tensor
    cuda_exe = codegen.compile(fusion, backend="cuda")
    cuda_exe.run({"N": gpu.array((3, 4))})
    assert [int(v) for v in gpu.function.last_args[-2:]] == [3, 4]   # M, then N


def test_the_launcher_loads_the_mangled_entry_point(gpu, monkeypatch):  # noqa: F811
    asked = []

    def load(cubin, name):
        asked.append(name)
        return gpu.function

    monkeypatch.setattr(launching, "load_function", load)
    fusion = fuserir.parse("fusion printf(x: f32[M]) {\n  y = x + 1\n  output y\n}")
    exe = codegen.compile(fusion, backend="cuda")
    (kernel,) = exe.kernels
    assert kernel.name == "printf" and cuda.entry_point(kernel.kir) == "printf_kernel"
    assert 'extern "C" __global__ void printf_kernel(' in kernel.source
    assert "// Kernel printf, generated" in kernel.source
    assert ".entry printf_kernel(" in nvrtc.ptx(kernel.source, kernel.name, arch="sm_90")
    exe.run({"x": gpu.array((8,))})
    assert asked == ["printf_kernel"]


def test_mangled_names_are_one_to_one_and_meet_no_reserved_name():
    kinds = ("tensor", "scalar", "fusion")
    names = NAMES + ["x_s", "x_kernel", "s_", "a_b", "\u00e9t\u00e9", "u6574_", "_", "__"]
    mangled = [cuda.mangle(n, k) for n in names for k in kinds]
    assert len(set(mangled)) == len(mangled)
    assert not set(mangled) & cuda._RESERVED
    assert all(cuda._IDENT.match(m) for m in mangled)
    # no reserved name looks mangled: a letter first, no __, a tag last
    looks = re.compile(r"[A-Za-z](?!.*__).*_(|s|kernel|x|sx|kernelx)\Z")
    assert not [r for r in cuda._RESERVED if looks.match(r)]
    assert cuda.mangle("__global_", "tensor") != "__global__"


def test_a_hand_built_kernel_keeps_its_names():
    x = kir.Buffer("x", fuserir.dtypes.DataType.f32, kir.Memory.global_)
    n = kir.Var("N", fuserir.dtypes.DataType.i32)
    k = kir.Kernel("k", [kir.TensorParam(x, [n], [kir.Var("x_stride0", n.dtype)], True)],
                   [kir.ScalarParam(n)], [], kir.LaunchConfig((kir.Const(1, n.dtype),) * 3,
                                                              (kir.Const(1, n.dtype),) * 3))
    source = cuda.emit_cuda(k)
    assert 'extern "C" __global__ void k(' in source and "f32* x," in source
    assert "i32 N)" in source and kir.arg_name(k, k.scalar_params[0]) == "N"


GRID_SUM = """
fusion gsum(s_work: f32[M, s_sem]) {
  s = sum(s_work, axes=[1])
  output s
}
schedule gsum {
  s.split(1, S, inner=false)
  s.split(0, 32)
  s.parallelize(0, BIDx)
  s.parallelize(1, TIDx)
  s.parallelize(2, BIDz)
  s.serial_grid_reduction()
}
"""


def test_workspaces_are_not_named_like_the_users_tensors_or_sizes():
    # s's turnstile workspaces would be s_work and s_sem, the names of the input and a size
    fusion = fuserir.parse(GRID_SUM)
    exe = codegen.compile(fusion, backend="interp")
    kernel = exe.kernels[0].kir
    names = [kir.arg_name(kernel, p) for p in kernel.params]
    assert len(set(names)) == len(names)
    assert [w.buffer.name for w in kernel.workspaces] == ["s_work_", "s_sem_"]
    x = np.arange(45 * 37, dtype=np.float32).reshape(45, 37) % 7
    assert np.array_equal(exe.run({"s_work": x, "S": 3})["s"], x.sum(axis=1))
    source = exe.kernels[0].source
    assert "i32* s_sem_," in source and "const f32* __restrict__ s_work_," in source
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90")[:4] == b"\x7fELF"
