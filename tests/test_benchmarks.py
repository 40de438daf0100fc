"""The benchmark scripts (benchmarks/): their pure-Python parts without a GPU (arguments,
byte counts, statistics, bandwidth arithmetic, table rows, the references against the
evaluator), and, marked gpu, a --quick run of each script in a subprocess."""

import json
import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import fuserir

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common, normalization, pointwise, reduction, shape_ops  # noqa: E402

SCRIPTS = {"pointwise": pointwise, "reduction": reduction, "shape_ops": shape_ops,
           "normalization": normalization}


def args_of(module, *argv):
    return common.parse_args(module.parser(), list(argv), module.SIZES)


def test_defaults_quick_and_overrides():
    full = args_of(pointwise)
    assert (full.repeat, full.warmup, full.copy_mib, full.elements) == (50, 5, 1024, 1 << 28)
    assert (full.rows, full.cols, full.json, full.no_torch) == (16384, 16384, None, False)
    quick = args_of(pointwise, "--quick")
    assert (quick.repeat, quick.warmup, quick.elements, quick.rows) == (5, 1, 1 << 20, 1024)
    given = args_of(reduction, "--quick", "--repeat", "7", "--softmax-cols", "96",
                    "--json", "out.json")
    assert (given.repeat, given.softmax_rows, given.softmax_cols, given.json) == \
        (7, 512, 96, "out.json")
    assert (args_of(reduction).softmax_rows, args_of(reduction).rows) == (8192, 16384)


@pytest.mark.parametrize("argv", [["--repeat", "0"], ["--warmup", "-1"],
                                  ["--elements", "x"]])
def test_bad_arguments_exit(argv, capsys):
    with pytest.raises(SystemExit):
        args_of(pointwise, *argv)


def test_select_cases():
    cases = reduction.cases(args_of(reduction, "--quick"))
    assert [c.name for c in cases] == ["sum_rows", "sum_cols", "max_rows", "sum_few_rows",
                                       "softmax"]
    assert [c.name for c in common.select(cases, "softmax,sum_rows")] == \
        ["softmax", "sum_rows"]
    with pytest.raises(SystemExit, match="unknown case.*nope"):
        common.select(cases, "nope")


def test_fusions_are_unscheduled_and_bytes_are_ideal():
    m, n, e = 64, 96, 1000
    cases = {c.name: c for c in pointwise.cases(args_of(
        pointwise, "--rows", str(m), "--cols", str(n), "--elements", str(e)))}
    cases.update({c.name: c for c in reduction.cases(args_of(
        reduction, "--rows", str(m), "--cols", str(n), "--softmax-rows", "8",
        "--softmax-cols", "32"))})
    assert all(not c.fusion.trace for c in cases.values())
    assert cases["add"].nbytes == 3 * 4 * e
    assert cases["bias_relu"].nbytes == 4 * (2 * m * n + n)
    assert cases["gelu_bf16"].nbytes == 2 * (2 * m * n + n)
    assert cases["sum_rows"].nbytes == 4 * (m * n + m)
    assert cases["sum_cols"].nbytes == 4 * (m * n + n)
    assert cases["sum_few_rows"].nbytes == 4 * (m * n + 8)
    assert cases["sum_few_rows"].target == ("copy", 0.75)
    assert cases["softmax"].nbytes == 4 * 2 * 8 * 32
    assert cases["gelu_bf16"].dtypes == "bf16"
    assert cases["add"].target == ("copy", 0.85)
    assert cases["sum_rows"].target == ("copy", 0.75)
    assert cases["softmax"].target == ("torch", 1.5)


def test_shape_ops_cases_bytes_and_targets():
    cases = {c.name: c for c in shape_ops.cases(args_of(shape_ops))}
    assert sorted(cases) == sorted(f"{op}_{dtype}_{shape}" for op in
                                   ("rotary", "transpose_add", "cat3", "swiglu")
                                   for dtype in ("bf16", "f32")
                                   for shape in ("8192x4096", "32768x1024"))
    assert all(not c.fusion.trace and c.target == ("copy", 0.80) for c in cases.values())
    elements = 8192 * 4096
    assert cases["rotary_bf16_8192x4096"].nbytes == 2 * 4 * elements     # x, cos, sin, out
    assert cases["transpose_add_f32_8192x4096"].nbytes == 4 * 3 * elements
    assert cases["cat3_f32_32768x1024"].nbytes == 4 * 2 * 32768 * 1024    # in once, out once
    assert cases["swiglu_bf16_8192x4096"].nbytes == 2 * 3 * elements // 2  # x, out: half
    assert [c.name for c in shape_ops.cases(args_of(shape_ops, "--quick"))][:3] == \
        ["rotary_bf16_256x512", "transpose_add_bf16_256x512", "cat3_bf16_256x512"]


def test_normalization_cases_bytes_and_targets():
    cases = {c.name: c for c in normalization.cases(args_of(normalization))}
    ops = ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward", "softmax",
           "cross_entropy")
    assert sorted(cases) == sorted(f"{op}_{dtype}_{shape}" for op in ops
                                   for dtype in ("bf16", "f32")
                                   for shape in ("8192x4096", "32768x1024"))
    assert all(not c.fusion.trace and c.target == ("copy", 0.80) for c in cases.values())
    r, d = 8192, 4096
    # x, w, b in; y out; mean and rstd (f32, one a row) out
    assert cases["layer_norm_bf16_8192x4096"].nbytes == 2 * (2 * r * d + 2 * d) + 4 * 2 * r
    # dy, x, w, mean, rstd in; dx, dw, db out
    assert cases["layer_norm_backward_f32_8192x4096"].nbytes == \
        4 * (3 * r * d + 3 * d + 2 * r)
    assert cases["cross_entropy_bf16_8192x4096"].nbytes == 2 * r * d + 8 * r + 4


@pytest.mark.parametrize("script, argv, message", [
    ("shape_ops", ["--dtypes", "f16"], "--dtypes: each of bf16 and f32, not 'f16'"),
    ("shape_ops", ["--shapes", "8192x4096x2"],
     "--shapes: each point is RxD, positive, D a multiple of 4"),
    ("shape_ops", ["--shapes", "64x30"],
     "--shapes: each point is RxD, positive, D a multiple of 4"),
    ("shape_ops", ["--shapes", "axb"], "--shapes: RxD points, comma-separated, not 'axb'"),
    ("normalization", ["--shapes", "0x4096"], "--shapes: each point is RxD, both positive"),
    ("normalization", ["--dtypes", "bf16,f64"],
     "--dtypes: each of bf16 and f32, not 'bf16,f64'"),
])
def test_shape_benchmarks_refuse_bad_arguments(script, argv, message, capsys):
    module = {"shape_ops": shape_ops, "normalization": normalization}[script]
    with pytest.raises(SystemExit):
        module.parse_args(argv)
    assert message in capsys.readouterr().err


def test_normalization_takes_rows_of_any_width():
    assert normalization.parse_args(["--shapes", "64x30"]).shapes == "64x30"


def tiny_cases():
    return (pointwise.cases(args_of(pointwise, "--rows", "5", "--cols", "40",
                                    "--elements", "300"))
            + reduction.cases(args_of(reduction, "--rows", "6", "--cols", "50",
                                      "--softmax-rows", "4", "--softmax-cols", "33"))
            + shape_ops.cases(args_of(shape_ops, "--shapes", "6x20,3x8"))
            + normalization.cases(args_of(normalization, "--shapes", "6x40")))


@pytest.mark.parametrize("case", tiny_cases(), ids=lambda c: c.name)
def test_reference_matches_evaluator(case):
    """Each case's reference (the one checked against the GPU) agrees with fuserir's."""
    arrays, values = common.make_inputs(np, case, seed=1)
    host = {t.name: arrays[t.name].view(ml_dtypes.bfloat16) if t.dtype.name == "bf16"
            else arrays[t.name] for t in case.fusion.inputs}
    want = fuserir.evaluate(case.fusion, host)
    got = case.reference(np, values)
    for t in case.fusion.outputs:
        np.testing.assert_allclose(np.asarray(got[t.name], np.float64),
                                   want[t.name].astype(np.float64),
                                   rtol=case.rtol, atol=case.atol)


def test_bf16_rounding_matches_ml_dtypes():
    x = np.concatenate([np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5], np.float32),
                        np.random.default_rng(0).standard_normal(1000).astype(np.float32)])
    bits = common.bf16_bits(np, x)
    assert [hex(b) for b in bits[:4]] == ["0x3f80", "0x3f80", "0x3f82", "0xc020"]
    np.testing.assert_array_equal(bits, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(common.bf16_values(np, bits),
                                  x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_statistics_and_bandwidth():
    s = common.summarize(range(1, 101))
    assert s == {"median_us": 50.5, "min_us": 1.0, "p10_us": pytest.approx(10.9),
                 "p90_us": pytest.approx(90.1), "runs": 100}
    assert common.gb_per_s(2 * 2 ** 30, 500.0) == pytest.approx(4294.967296)
    r = {"bytes": 3 * 4 * 2 ** 28, "copy_gbps": 4000.0, "target": ("copy", 0.85),
         "fuserir": {"median_us": 900.0}, "torch": {"median_us": 800.0}}
    d = common.derived(r)
    assert d["gbps"] == pytest.approx(3 * 4 * 2 ** 28 / 900e-6 / 1e9)
    assert d["copy_fraction"] == pytest.approx(d["gbps"] / 4000.0)
    assert d["torch_ratio"] == pytest.approx(1.125)
    assert d["target_met"] is (d["copy_fraction"] >= 0.85)
    r["target"] = ("torch", 1.5)
    assert common.derived(r)["target_met"] is True
    r["torch"] = None
    assert common.derived(r)["target_met"] is None and common.derived(r)["torch_ratio"] is None


def test_table_rows():
    header = common.TABLE_HEADER.splitlines()
    assert header[0].startswith("| case | shape |") and header[1] == "|---" * 11 + "|"
    r = {"case": "add", "shape": "[268435456]", "dtype": "f32", "bytes": 3 * 2 ** 30,
         "copy_gbps": 4000.0, "target": ("copy", 0.85), "kernels": 1, "ok": True,
         "max_abs_error": 0.0, "fuserir": {"median_us": 900.0}, "torch": None}
    cells = [c.strip() for c in common.table_row(r).strip("|").split("|")]
    assert len(cells) == 11
    assert cells == ["add", "[268435456]", "f32", "1", "900.0", "3579", "89.5", "n/a", "n/a",
                     "0", ">= 85% of copy: met"]
    r.update(torch={"median_us": 450.0}, target=("torch", 1.5), ok=False,
             max_abs_error=float("nan"))
    cells = [c.strip() for c in common.table_row(r).strip("|").split("|")]
    assert cells[7:] == ["450.0", "2.00", "nan (FAIL)", "<= 1.5x torch: missed"]
    failed = {**r, "fuserir": None, "torch": None, "kernels": None, "max_abs_error": None,
              "ok": None, "error": "FuserirError: no schedule"}
    cells = [c.strip() for c in common.table_row(failed).strip("|").split("|")]
    assert cells[3:] == ["n/a"] * 7 + ["error: FuserirError: no schedule"]


def test_no_gpu_exits_with_a_message(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)      # import cupy fails
    with pytest.raises(SystemExit) as exit_:
        common.require_gpu()
    assert exit_.value.code == common.NO_GPU_EXIT
    assert "needs an NVIDIA GPU" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_script_quick_on_gpu(script, tmp_path):
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, f"benchmarks/{script}.py", "--quick", "--json",
                          str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "copy bandwidth" in run.stdout and common.TABLE_HEADER in run.stdout
    report = json.loads(out.read_text())
    names = [c.name for c in SCRIPTS[script].cases(args_of(SCRIPTS[script], "--quick"))]
    assert [r["case"] for r in report["results"]] == names
    for r in report["results"]:
        assert f"| {r['case']} |" in run.stdout
        assert r["ok"] and r["fuserir"]["median_us"] > 0, r
    assert report["copy"]["gbps"] > 0 and report["environment"]["device"]


@pytest.mark.gpu
def test_host_overhead_on_gpu():
    run = subprocess.run([sys.executable, "benchmarks/host_overhead.py", "--calls", "20",
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [(r["case"].split()[0], r["queue"]) for r in rows] == [
        (case, queue) for case in ("hopper", "split-K", "pointwise")
        for queue in ("idle", "busy")]
    from codegen.launch import device_model
    hopper = device_model().cc >= (9, 0)
    split_k = "1 kernel(s), tensor maps" if hopper else "2 kernel(s), no maps"
    assert [r["plan"] for r in rows[::2]] == ["1 kernel(s), tensor maps", split_k,
                                              "1 kernel(s), no maps"]
    for r in rows:
        assert r["fuserir"]["median"] > 0 and r["triton_launch"]["median"] > 0, r
        assert r["max_abs_error"] < 4, r     # sane only: test_calls_gpu checks exactly
    assert "whole call" in run.stdout and "launch, maps re-pointed" in run.stdout


def test_perf_page_has_the_table_header():
    assert common.TABLE_HEADER in (ROOT / "docs" / "perf.md").read_text()


# -- benchmarks/matmul.py ----------------------------------------------------------------------

from benchmarks import matmul as matmul_bench  # noqa: E402


def test_matmul_arguments_and_fusion():
    args = matmul_bench.parse_args(["--shapes", "256x128x416,64x64x64", "--splitk", "3"])
    assert args.shape_list == [(256, 128, 416), (64, 64, 64)] and args.splitk == 3
    fusion, params = matmul_bench.build(args)
    assert params.splitk_mode == "serial"
    assert params.cta_tile == (256, 128, 32) and fusion.scalars == {"splitk": 3}
    assert fusion.tensor("acc").grid_reduction == "serial"


@pytest.mark.parametrize("layout, config, instruction", [
    *[(lay, ("mma.sync", 4, 3, True), "mma.m16n8k16") for lay in sorted(matmul_bench.OPERANDS)],
    ("TT", ("hopper", "128x128", 3, False), "wgmma"),     # a Hopper proof takes seconds
])
def test_matmul_matrix_fusions_lower_for_every_layout(layout, config, instruction):
    import codegen
    f = matmul_bench.matrix_fusion(layout, *config)
    exe = codegen.compile(f, backend="interp")
    assert instruction in exe.kernels[0].kir_text
    rng = np.random.default_rng(0)
    m, n, k = 40, 24, 48
    dims = {"M": m, "N": n, "K": k}
    data = {tv.name: rng.integers(-2, 3, [dims[str(e)] for e in tv.shape]).astype(np.float16)
            for tv in f.inputs}
    got = exe.run({**data, "splitk": 2})["out"]
    assert np.array_equal(got, fuserir.evaluate(f, data)["out"])


def test_matmul_mismatch_count():
    ref = np.array([[1.0, 100.0]])
    out = np.array([[1.0 + 2e-3, 100.0 + 0.2]])
    # K = 100: atol 1e-3. Off by 2e-3 > 1e-3 + 2^-10 * 1 (1.98e-3): counts; off by
    # 0.2 > 1e-3 + 2^-10 * 100 (0.099): counts
    assert matmul_bench.mismatches(np, out, ref, 100) == 2
    assert matmul_bench.mismatches(np, ref, ref, 100) == 0


# -- benchmarks/splitk_sweep.py ----------------------------------------------------------------

from benchmarks import splitk_sweep  # noqa: E402


def test_the_split_k_sweep_covers_the_skinny_and_decode_points():
    args = splitk_sweep.parse_args([])
    points = splitk_sweep.shapes(args)
    assert len(points) == 5 * 5 * 3 + 5 * 4 and len(set(points)) == len(points)
    assert (16, 256, 262144) in points and (1, 14336, 4096) in points
    assert len(points) * len(args.layout_list) * len(args.dtype_list) == 760
    assert splitk_sweep.shapes(splitk_sweep.parse_args(["--no-decode", "--mn", "64",
                                                        "--k", "1024"])) == [(64, 64, 1024)]
    assert splitk_sweep.shapes(splitk_sweep.parse_args(
        ["--shapes", "128x128x262144,136X184x175704"])) == [(128, 128, 262144),
                                                            (136, 184, 175704)]


@pytest.mark.parametrize("argv, message", [
    (["--layouts", "TX"], "--layouts: unknown layout 'TX'"),
    (["--dtypes", "f32"], "--dtypes: 'f32' is not f16 or bf16"),
    (["--k", "16k"], "--mn and --k take comma-separated integers"),
    (["--from", "x.json"], "--from needs --plot"),
    (["--shapes", "128x128"], "--shapes: each point is MxNxK, three positive integers"),
    (["--shapes", "0x1x1"], "--shapes: each point is MxNxK, three positive integers"),
    (["--shapes", "axbxc"], "--shapes takes MxNxK points, comma-separated"),
])
def test_the_split_k_sweep_refuses_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        splitk_sweep.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("layout", sorted(splitk_sweep.OPERANDS))
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_split_k_sweep_fusions_mean_the_product(layout, dtype, rng):
    m, n, k = 3, 5, 7
    f = splitk_sweep.fusion(layout, dtype)
    dims = {"M": m, "N": n, "K": k}
    np_dtype = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    a, b = (rng.integers(-3, 4, [dims[d] for d in spec.strip("[]").split(", ")]).astype(np_dtype)
            for spec in splitk_sweep.OPERANDS[layout])
    out = fuserir.evaluate(f, {"A": a, "B": b})["out"]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (a64 if layout[0] == "T" else a64.T) @ (b64 if layout[1] == "T" else b64.T)
    assert np.array_equal(out.astype(np.float64), want)


def test_the_split_k_sweep_summary_table_and_plot_from_a_file(tmp_path, capsys):
    points = [{"layout": "NT", "dtype": "f16", "shape": "128x128x262144", "plan": "p",
               "mismatches": 0, "fuserir_us": 50.0, "cublas_us": 55.0},
              {"layout": "TN", "dtype": "bf16", "shape": "1x4096x4096", "plan": "q",
               "mismatches": 0, "fuserir_us": 20.0, "cublas_us": 18.0}]
    low, mean = splitk_sweep.summary(points)
    assert low == pytest.approx(0.9) and mean == pytest.approx((1.1 * 0.9) ** 0.5)
    points[0].update(copy_fraction=0.8, triton_us=60.0, triton_kind="partials",
                     mismatches_triton=0)
    text = splitk_sweep.table(points, "H200")
    assert ("| NT | f16 | 128x128x262144 | p | 50.0 | 55.0 | 60.0 (partials) | 1.10x | "
            "1.20x | 80 | 0, Triton 0 |") in text
    assert "| TN | bf16 | 1x4096x4096 | q | 20.0 | 18.0 | - | 0.90x | - | nan | 0 |" in text
    assert "slowest point 0.90x cuBLAS, geometric mean 0.99x over 2 points" in text
    source = tmp_path / "points.json"
    source.write_text(json.dumps(points))
    png = tmp_path / "sweep.png"
    status = splitk_sweep.main(["--plot", str(png), "--from", str(source)])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert status == 1 and "no plot: matplotlib is not installed" in capsys.readouterr().err
    else:
        assert status == 0 and png.read_bytes().startswith(b"\x89PNG")


# -- benchmarks/matmul_sweep.py ----------------------------------------------------------------

from benchmarks import matmul_sweep  # noqa: E402


def test_the_matmul_sweep_covers_transformer_layers_and_the_named_shapes():
    args = matmul_sweep.parse_args([])
    points = args.shape_list
    assert len(points) >= 24 and len(set(points)) == len(points)
    assert min(m for m, _, _ in points) == 256 and max(m for m, _, _ in points) == 16384
    assert all(768 <= x <= 16384 for _, n, k in points if k != 50304 for x in (n, k))
    for named in ("16384x4096x4096", "4096x14336x4096", "4096x4096x14336", "2048x12288x4096",
                  "512x8192x8192", "8192x2048x2048", "3072x3072x3072", "6144x6144x6144",
                  "4096x4096x4096", "8192x8192x8192", "1024x2048x50304", "1024x1024x50304",
                  "1024x2048x4096", "1024x1024x4096"):
        assert tuple(int(x) for x in named.split("x")) in points
    assert any(k * 4 <= min(m, n) for m, n, k in points)          # K small beside M, N
    assert args.layout_list == ["TT", "NT", "TN"] and args.dtype_list == ["f16", "bf16"]
    assert matmul_sweep.parse_args(["--shapes", "64x64x64"]).shape_list == [(64, 64, 64)]


@pytest.mark.parametrize("argv, message", [
    (["--layouts", "TX"], "--layouts: unknown layout 'TX'"),
    (["--dtypes", "f32"], "--dtypes: 'f32' is not f16 or bf16"),
    (["--from", "x.json"], "--from needs --plot"),
    (["--shapes", "1x2"], "--shapes: each point is MxNxK, three positive integers"),
    (["--repeat", "0"], "--repeat must be at least 1"),
])
def test_the_matmul_sweep_refuses_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        matmul_sweep.parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_matmul_sweep_table_summary_and_plot_from_a_file(tmp_path, capsys):
    points = [{"layout": "TN", "dtype": "f16", "shape": "4096x4096x4096", "plan": "p",
               "mismatches": 0, "fuserir_us": 200.0, "cublas_us": 180.0,
               "triton_us": 190.0, "mismatches_triton": 0},
              {"layout": "NT", "dtype": "bf16", "shape": "1024x1024x4096", "plan": "q",
               "mismatches": 0, "fuserir_us": 20.0, "cublas_us": 22.0}]
    text = matmul_sweep.table(points, "H100")
    # 2 * 4096^3 / 200 us = 687 TFLOP/s
    assert ("| TN | f16 | 4096x4096x4096 | p | 200.0 | 687 | 180.0 | 190.0 | 0.90x | 0.95x | "
            "0, Triton 0 |") in text
    assert "| NT | bf16 | 1024x1024x4096 | q | 20.0 | 429 | 22.0 | nan | 1.10x | - | 0 |" \
        in text
    assert "slowest point 0.90x cuBLAS, geometric mean 0.99x over 2 points" in text
    assert "against Triton: slowest 0.95x, geometric mean 0.95x over 1 points" in text
    source = tmp_path / "points.json"
    source.write_text(json.dumps(points))
    png = tmp_path / "sweep.png"
    status = matmul_bench.main(["--sweep", "--plot", str(png), "--from", str(source)])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert status == 1 and "no plot: matplotlib is not installed" in capsys.readouterr().err
    else:
        assert status == 0 and png.read_bytes().startswith(b"\x89PNG")


# -- benchmarks/splitk_stress.py ---------------------------------------------------------------

from benchmarks import splitk_stress  # noqa: E402


def test_the_split_k_stress_defaults_to_the_seed_shapes_100_repeats_1000_fresh():
    args = splitk_stress.parse_args([])
    assert args.shape_list == [(128, 128, 262144), (136, 184, 175704)]
    assert (args.repeats, args.fresh, args.layout_list, args.dtype_list) == \
        (100, 1000, ["NT"], ["f16"])


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "128x128"], "--shapes: each point is MxNxK, three positive integers"),
    (["--layouts", "TX"], "--layouts: unknown layout 'TX'"),
    (["--dtypes", "f32"], "--dtypes: 'f32' is not f16 or bf16"),
    (["--repeats", "0"], "--repeats must be at least 1, --fresh at least 0"),
])
def test_the_split_k_stress_refuses_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        splitk_stress.parse_args(argv)
    assert message in capsys.readouterr().err


# -- benchmarks/splitk_timeline.py -------------------------------------------------------------

from benchmarks import splitk_timeline  # noqa: E402
import codegen  # noqa: E402
from codegen import nvrtc  # noqa: E402


def test_the_split_k_timeline_stamps_each_phase_of_the_generated_kernel():
    k, mn, args = splitk_timeline.parse_args(["8448", "--splitk", "66", "--cta-tile",
                                              "128x64x64"])
    assert k == 8448 and mn == (128, 128) and args.splitk_mode == "parallel" and \
        args.stages == 6
    assert splitk_timeline.parse_args(["175704", "--mn", "136x184"])[1] == (136, 184)
    with pytest.raises(SystemExit, match="--mn takes MxN"):
        splitk_timeline.parse_args(["8448", "--mn", "136"])
    fusion, _ = matmul_bench.build(args)
    compiled = codegen.compile(fusion, backend="cuda").kernels[0]
    text = splitk_timeline.instrument(compiled.source)
    stamps = [line for line in text.split("\n") if "%%globaltimer" in line]
    assert [int(line.split("+ ")[-1].split("]")[0]) for line in stamps] == list(range(5))
    # every CTA of every tile its own slots: the block's linear index in the grid
    assert all("(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) * 8"
               in line for line in stamps)
    order = [text.index(mark) for mark in (
        "extern __shared__", "parallel grid reduction of", "sem_wait(&acc_arrived",
        "sem_arrive(&acc_passed", "out_[", "sem_wait(&acc_passed")]
    assert order == sorted(order)
    lines = text.split("\n")
    at = {int(line.split("+ ")[-1].split("]")[0]): i for i, line in enumerate(lines)
          if "%%globaltimer" in line}
    assert "extern __shared__" in lines[at[0] + 1]
    assert "parallel grid reduction" in lines[at[1] + 1]
    assert "bar.sync" in lines[at[2] - 1] and "sem_wait(&acc_arrived" in lines[at[2] - 4]
    # the epilogue: after the sums (a block's close), before the last CTA's reset
    epilogue = "\n".join(lines[at[3]:at[4]])
    assert lines[at[3] - 1].strip() == "}" and "out_[" in epilogue
    assert "acc_work" not in epilogue and "sem_" not in epilogue
    assert "sem_wait(&acc_passed" in "\n".join(lines[at[4]:at[4] + 5])
    nvrtc.compile_to_cubin(text, compiled.kir.name, "sm_90a")      # it still compiles


def test_the_split_k_timeline_takes_a_layout_and_the_swapped_plan():
    """--layout TT with --swap-mn: the layout fusion scheduled with the swapped tiles
    (192 rows of N by 48 of M: an accumulator that stays live through the sum, the form
    the timeline stamps), its kernel stamped at the same five points."""
    from fuserir.scheduler.matmul import schedule_matmul
    k, mn, args = splitk_timeline.parse_args([
        "175704", "--mn", "40x184", "--layout", "tt", "--splitk", "132", "--cta-tile",
        "192x48x64", "--stages", "3", "--producer-registers", "40", "--swap-mn"])
    assert (k, mn, args.layout) == (175704, (40, 184), "TT")
    params = matmul_bench.params_of(args)
    assert params.swap_mn and params.cta_tile == (192, 48, 64)
    fusion = matmul_bench.layout_fusion(args.layout)
    schedule_matmul(fusion, params)
    compiled = codegen.compile(fusion, backend="cuda").kernels[0]
    text = splitk_timeline.instrument(compiled.source)
    assert text.count("%%globaltimer") == 5
    with pytest.raises(SystemExit, match="--layout takes TT, TN, NT or NN"):
        splitk_timeline.parse_args(["8448", "--layout", "XT"])


def test_the_split_k_timeline_names_a_kernel_it_cannot_stamp():
    with pytest.raises(splitk_timeline.NotInstrumentable, match="no parallel grid reduction"):
        splitk_timeline.instrument('extern "C" __global__ void k() {}')


def test_the_plan_comparison_parses_plans():
    from benchmarks import matmul_plans
    args = matmul_plans.parse_args(["TT", "136x184x175704", "128x192x64x4:66:parallel:r40",
                                    "192x136x64x3:132:atomic:r40:swap"])
    (first, _), (second, _) = args.params
    assert (first.cta_tile, first.warp_tile, first.instruction_tile, first.stages) == \
        ((128, 192, 64), (64, 192, 64), (64, 192, 16), 4)
    assert (first.splitk_factor, first.splitk_mode, first.splitk_interleaved,
            first.producer_registers, first.swap_mn) == (66, "parallel", True, 40, False)
    assert (second.cta_tile, second.splitk_mode, second.swap_mn) == \
        ((192, 136, 64), "atomic", True)
    assert args.size == (136, 184, 175704)


def test_the_plan_comparison_names_persistent_staged_and_automatic_plans():
    from benchmarks import matmul_plans
    texts = ["128x256x64x4:1:serial:persistent:c512", "128x256x64x3:1:serial:smem",
             "192x136x64x3:132:parallel:r40:swap", "128x256x64x4:1:serial:persistent:g8",
             "128x256x64x4:1:serial:smem:tmastore"]
    args = matmul_plans.parse_args(["TN", "4096x4096x4096", "auto", *texts])
    auto, (persistent, ctas), (staged, _), swapped, (grouped, _), (stored, _) = args.params
    assert (staged.tma_store, stored.tma_store, stored.use_smem_epilogue) == \
        (False, True, True)
    assert (persistent.tile_group, grouped.tile_group) == (1, 8)
    assert auto == (None, None)           # the heuristic's, chosen on the GPU's device
    assert (persistent.persistent, persistent.use_smem_epilogue, ctas) == (True, False, 512)
    assert (staged.persistent, staged.use_smem_epilogue,
            staged.promote_prologue_smem_reuse) == (False, True, True)
    assert [matmul_plans.plan_text(*p) for p in args.params[1:]] == texts


@pytest.mark.parametrize("argv, message", [
    (["TT", "136x184", "128x64x64x6:66:parallel"], "shape '136x184': expected MxNxK"),
    (["TT", "8x8x8", "128x64x64:66:parallel"], "TILExSTAGES is four sizes"),
    (["TT", "8x8x8", "128x64x64x6:66"], "expected TILExSTAGES:SPLITS:MODE"),
    (["TT", "8x8x8", "128x64x64x6:66:parallel:fast"],
     "unknown option 'fast' (rN, swap, persistent, cN, gN, smem or tmastore)"),
    (["TT", "8x8x8", "128x64x64x6:1:serial:tmastore"], "tma_store: TMA stores the Hopper "
     "path's staged output tile"),
    (["TT", "8x8x8", "128x64x64x6:1:serial:c4"], "cN (the CTAs walking the tiles) needs "
     "persistent"),
    (["TT", "8x8x8", "128x64x64x6:2:serial:persistent"], "persistent: K is not split"),
    (["TT", "8x8x8", "128x64x64x6:66:sideways"], "splitk_mode 'sideways': expected"),
    (["XY", "8x8x8", "128x64x64x6:66:parallel"], "invalid choice: 'XY'"),
])
def test_the_plan_comparison_refuses_bad_arguments(argv, message, capsys):
    from benchmarks import matmul_plans
    with pytest.raises(SystemExit):
        matmul_plans.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.fixture
def triton_missing(monkeypatch):
    """`import triton` fails, and the Triton baseline is not already imported."""
    import benchmarks
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.delitem(sys.modules, "benchmarks.triton_persistent", raising=False)
    monkeypatch.delattr(benchmarks, "triton_persistent", raising=False)


def test_the_plan_comparison_goes_on_without_triton_in_one_line(triton_missing, capsys):
    from benchmarks import common, matmul_plans
    args = matmul_plans.parse_args(["TT", "4096x4096x4096", "auto"])
    assert not args.no_triton
    assert common.triton_module("triton_persistent", args.no_triton) is None
    err = capsys.readouterr().err
    assert err.startswith("no Triton baseline: ") and err.count("\n") == 1
    args = matmul_plans.parse_args(["TT", "4096x4096x4096", "auto", "--no-triton"])
    assert args.no_triton and common.triton_module("triton_persistent", True) is None
    assert capsys.readouterr().err == ""


def test_the_plan_comparison_reports_a_triton_baseline_that_fails(capsys):
    import types
    from benchmarks import matmul_plans

    def refuse(a, b, out_dtype, sms):
        raise ValueError("C: TMA needs 16-byte aligned rows (N = 259)")
    bench = types.SimpleNamespace(torch=types.SimpleNamespace(float16="f16"))
    baseline = types.SimpleNamespace(matmul_fn=refuse)
    matmul_plans.print_triton_row(bench, baseline, None, None, None, 100.0, 132)
    assert capsys.readouterr().out == ("  Triton persistent: failed: ValueError: C: TMA needs "
                                       "16-byte aligned rows (N = 259)\n")
