"""The `fuserir` command, run for real in a subprocess: output and every error path.

Most commands only read the examples; they are declared with `command(key, ...)` and run
all at once, in parallel, the first time a test asks for one (`ran[key]`), which keeps
this file fast on two cores. Tests that need files of their own run their commands
directly.
"""

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TILED = EXAMPLES / "splitk_tiled.fz"
POINTWISE = EXAMPLES / "pointwise_chain.fz"
SOFTMAX = EXAMPLES / "softmax.fz"
SMALL = "M=20,N=18,K=40,splitk=2"     # 2x2 blocks, a short last split, partial tiles

TWO = ("fusion a(x: f32[N]) {\n  y = x * 2.0\n  output y\n}\n"
       "fusion b(x: f32[N]) {\n  y = x + 1.0\n  output y\n}\n")
BAD = "fusion f(x: f32[N]) {\n  y = frobnicate(x)\n  output y\n}\n"
TIDY_REDUCTION = ("fusion f(x: f32[M, N]) {\n  s = sum(x, axes=[1])\n  output s\n}\n"
                  "schedule f {\n  s.parallelize(0, BIDx)\n  s.parallelize(1, TIDz)\n}\n")
ENV_VARS = ("FUSERIR_DUMP", "FUSERIR_DUMP_AFTER", "FUSERIR_TRACEBACK")
# a 300-term sum (the parser used to recurse per term) and a file in Latin-1
DEEP = "fusion deep(x: f32[N]) {\n  y = " + " + ".join(["x"] * 300) + "\n  output y\n}\n"
LATIN1 = "fusion f(x: f32[N]) {\n  y = x + 1  # café\n  output y\n}\n".encode("latin-1")


def fuserir(*args, cwd=None, env=None, module=True):
    command = [sys.executable, "-m", "fuserir"] if module else [_console_script()]
    full_env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    full_env.update(env or {})
    result = subprocess.run([*command, *map(str, args)], capture_output=True, text=True,
                            cwd=cwd, env=full_env)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _console_script():
    script = pathlib.Path(sys.executable).parent / "fuserir"
    return str(script) if script.exists() else shutil.which("fuserir")


def _gpu_present():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no driver, no device
        return False


GPU = _gpu_present()
COMMANDS = {}


def command(key, *args, env=None, cwd=None):
    """Declare a command for the parallel batch; "{tmp}" in an argument is a directory
    holding two.fz (TWO), bad.fz (BAD) and tidy.fz (TIDY_REDUCTION)."""
    COMMANDS[key] = (args, env, cwd)


def write(directory, name, text):
    path = directory / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fz")
    for name, text in (("two.fz", TWO), ("bad.fz", BAD), ("tidy.fz", TIDY_REDUCTION),
                       ("deep.fz", DEEP)):
        write(tmp, name, text)
    (tmp / "latin1.fz").write_bytes(LATIN1)
    (tmp / "bom.fz").write_bytes(b"\xef\xbb\xbf" + TWO.split("fusion b")[0].encode())

    def go(spec):
        args, env, cwd = spec
        return fuserir(*(str(a).replace("{tmp}", str(tmp)) for a in args), env=env, cwd=cwd)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {key: pool.submit(go, spec) for key, spec in COMMANDS.items()}
        results = {key: future.result() for key, future in futures.items()}
    results["tmp"] = tmp
    return results


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# ---------------------------------------------------------------------------------------
# parse, eval
# ---------------------------------------------------------------------------------------

command("parse", "parse", POINTWISE)
command("version", "--version")
command("eval", "eval", SOFTMAX, "--size", "M=4")
command("eval-json", "eval", EXAMPLES / "splitk_matmul.fz", "--json")
command("eval-softmax-json", "eval", SOFTMAX, "--json")
command("eval-pointwise-json", "eval", POINTWISE, "--json")


def test_version_prints_the_package_version(ran):
    """One home for the version: fuserir.__version__, which pyproject.toml reads too."""
    import fuserir
    assert ok(ran["version"]) == f"fuserir {fuserir.__version__}\n"
    assert fuserir.__version__ == "0.1.0"


def test_parse_prints_canonical_text_that_parses_to_itself(ran):
    first = ok(ran["parse"])
    assert "fusion pointwise_chain(x: f32[M, N], y: f32[M, N]) {" in first
    assert "xs.compute_at(out, 2)" in first
    again = write(ran["tmp"], "again.fz", first)
    assert ok(fuserir("parse", again)) == first


def test_eval_summarises_outputs_with_given_and_default_sizes(ran):
    out = ok(ran["eval"])
    assert "softmax: M=4, N=19" in out
    assert "out: float32[4, 19]" in out


def test_eval_json_and_defaults_exercise_edges(ran):
    report = json.loads(ok(ran["eval-json"]))["splitk_nt"]
    assert report["sizes"] == {"M": 19, "N": 19, "K": 19, "splitk": 3}
    assert report["outputs"]["out"]["shape"] == [19, 19]
    row_sums = json.loads(ok(ran["eval-softmax-json"]))["softmax"]["outputs"]["out"]
    assert 0 < row_sums["max"] <= 1.0


def test_eval_default_size_is_twice_the_tile_plus_a_remainder(ran):
    report = json.loads(ok(ran["eval-pointwise-json"]))
    assert report["pointwise_chain"]["sizes"] == {"M": 19, "N": 2 * 128 + 3}


# ---------------------------------------------------------------------------------------
# dump
# ---------------------------------------------------------------------------------------

command("list-passes", "dump", "--list-passes")
command("list-passes-json", "dump", "--list-passes", "--json")
command("dump-fusion", "dump", TILED, "--stage", "fusion")
command("dump-scheduled", "dump", TILED, "--stage", "scheduled")
command("dump-scheduled-pointwise", "dump", POINTWISE, "--stage", "scheduled")
command("dump-scheduled-auto", "dump", SOFTMAX, "--stage", "scheduled")
command("dump-kernel", "dump", TILED)
command("dump-after-allocation", "dump", TILED, "--after", "allocation")
command("dump-after-inline", "dump", TILED, "--after", "inline_defaults")
command("dump-drop", "dump", TILED, "--drop", "sync1")
command("dump-cuda", "dump", TILED, "--stage", "cuda")
command("dump-ptx", "dump", TILED, "--stage", "ptx", "--arch", "sm_90")

PASSES = ["narrow_vectors", "inline_defaults", "validate", "loop_nests", "allocation", "indexing",
          "unroll_register_loops", "block_reductions", "grid_reductions", "predicates",
          "circular_buffer", "reuse_shared", "insert_syncs", "verify_hazards"]


def test_dump_list_passes_in_pipeline_order(ran):
    out = ok(ran["list-passes"])
    names = [line.split()[1] for line in out.splitlines()]
    assert names == PASSES[:-1] + ["drop_syncs", "verify_hazards"]
    assert "13  insert_syncs" in out and "(optional: --without insert_syncs)" in out
    assert " -  drop_syncs" in out and "(only with --drop ID,...)" in out
    rows = json.loads(ok(ran["list-passes-json"]))
    assert [r["name"] for r in rows if r["number"]] == PASSES


def test_dump_fusion_and_scheduled_stages(ran):
    fusion = ok(ran["dump-fusion"])
    assert fusion.startswith("fusion splitk_nt(A: f16[K, M], B: f16[K, N]) {\n"
                             "  acc = matmul(A, B, layout=NT)\n")
    assert "schedule" not in fusion
    out = ok(ran["dump-scheduled"])
    assert ("As: f16[K, M] shared loop=[iBIDx{ceildiv(M, 16)} bBIDy{1} iTIDy{16} bTIDx{16} "
            "i{splitk}") in out
    assert ("out: f16[M, N] global loop=[iBIDx{ceildiv(M, 16)} iBIDy{ceildiv(N, 16)} "
            "iTIDy{16} iTIDx{16}]") in out
    assert "schedule splitk_nt {\n  acc.split(2, splitk, inner=false)\n" in out
    assert "# as lowering places them (after pass inline_defaults): 0 changed" in out


def test_dump_scheduled_marks_what_lowering_places_differently(ran):
    out = ok(ran["dump-scheduled-pointwise"])
    assert "changed, marked *" in out
    assert ("* t2: f32[M, N] local loop=[iBIDx{M} i{ceildiv(N, 128)} iTIDx{128}] "
            "compute_at=3") in out


def test_dump_of_an_unscheduled_fusion_shows_its_automatic_schedule(ran):
    out = ok(ran["dump-scheduled-auto"])
    assert out.startswith("# automatic schedule (softmax has none of its own)")
    assert "schedule softmax {" in out


def test_dump_kernel_shows_every_barrier_with_id_and_reason(ran):
    out = ok(ran["dump-kernel"])                 # --stage kernel, after the last pass
    lines = out.splitlines()
    assert lines[0].startswith("kernel splitk_nt(f16 A[K, M], f16 B[K, N], f16 out[M, N]")
    assert lines[1].strip() == ("grid=(ceildiv(M, 16), ceildiv(N, 16), 1) block=(16, 16, 1) "
                                "index=i32")
    assert "__syncthreads() [sync1]  // RAW on As: S13 -> S20; RAW on Bs: S16 -> S20" in out
    assert ("__syncthreads() [sync2]  // WAR on As: S20 -> S13, loop-carried; WAR on Bs: "
            "S20 -> S16, loop-carried") in out


def test_dump_after_a_pass(ran):
    out = ok(ran["dump-after-allocation"])
    assert "alloc shared f16 As[256] @ byte 0" in out
    assert "alloc shared f16 Bs[256] @ byte 512" in out
    assert "__syncthreads" not in out and "compute " in out
    assert ok(ran["dump-after-inline"]).startswith("# no kernel IR before loop_nests")


def test_dump_drop_shows_the_kernel_without_that_barrier_and_says_it_is_refused(ran):
    result = ran["dump-drop"]
    out = ok(result)
    assert "[sync1]" not in out and "[sync2]" in out
    assert "the verifier refuses kernel splitk_nt (2 hazard(s))" in result.stderr


def test_dump_cuda_and_ptx(ran):
    cuda = ok(ran["dump-cuda"])
    assert 'extern "C" __global__ void splitk_nt_kernel(' in cuda   # the mangled entry
    assert cuda.count("__syncthreads();") == 2
    ptx = ok(ran["dump-ptx"])
    assert ".target sm_90" in ptx and ".entry splitk_nt_kernel(" in ptx and "bar.sync" in ptx


# ---------------------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------------------

command("inspect", "inspect", TILED, "--size", SMALL)
command("inspect-json", "inspect", TILED, "--size", SMALL, "--json", "--drop", "sync2")


def test_inspect_summary_page(ran):
    out = ok(ran["inspect"])
    assert out.startswith("splitk_nt at K=40, M=20, N=18, splitk=2")
    assert "grid   (ceildiv(M, 16), ceildiv(N, 16), 1) = (2, 2, 1): 4 block(s)" in out
    assert "block  (16, 16, 1) = (16, 16, 1): 256 thread(s), 8 warp(s)" in out
    assert "S1  As  f16[256]  bytes [0, 512)     @ byte 0" in out
    assert "S2  Bs  f16[256]  bytes [512, 1024)  @ byte 512" in out
    assert "no two allocations share bytes" in out
    assert "shared memory: 1024 bytes at these sizes; limit per block after opt-in" in out
    assert "sync1  S17  __syncthreads() [sync1]  in for i0 > for i1" in out
    assert "RAW on As: S13 -> S20" in out and "WAR on Bs: S20 -> S16, loop-carried" in out
    assert "registers (ptxas, sm_" in out and "spill stores 0 bytes" in out
    assert out.rstrip().endswith("verifier: proved free of shared-memory hazards")
    if not GPU:
        assert "232448 bytes (227 KB) (no GPU here: sm_90's documented opt-in limit)" in out


def test_inspect_bank_conflicts_section(ran):
    # Bs[tx * 16 + k] (f16, at byte 512): lane tx of a warp touches word 128 + 8 tx, so
    # tx = 0, 4, 8, 12 hit bank 0 with four distinct words: degree 4. As[ty * 16 + k]:
    # a warp spans ty = 0, 1 (words 8 apart), the 16 lanes of each ty broadcast: degree 1.
    out = ok(ran["inspect"])
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("shared-memory bank conflicts (block (0, 0, 0), every "
                                    "warp; each enclosing loop at its first 2 iterations and "
                                    "its last): 2 of 4 access(es) conflicted"))
    section = lines[start + 1:start + 7]
    assert section[0].split()[:8] == ["S13", "store", "As", "2", "B", "1x32", "lanes", "worst"]
    assert section[0].split()[8] == "1"
    assert section[1].split()[:3] == ["S16", "store", "Bs"] and "worst 4" in section[1]
    assert section[2].strip() == ("e.g. warp 0, i0=0 i1=0 i3=0, phase 0, bank 0: words 128, "
                                  "160, 192, 224 (lanes 0, 4, 8, 12)")
    assert section[3].split()[:3] == ["S20", "load", "As"] and "worst 1" in section[3]
    assert section[4].split()[:3] == ["S20", "load", "Bs"] and "worst 4" in section[4]
    assert lines.index("shared-memory bank conflicts (block (0, 0, 0), every warp; each "
                       "enclosing loop at its first 2 iterations and its last): 2 of 4 "
                       "access(es) conflicted") < next(i for i, line in enumerate(lines)
                                                        if line.startswith("registers"))


command("inspect-pointwise", "inspect", POINTWISE)


def test_inspect_bank_conflicts_without_conflicts(ran):
    out = ok(ran["inspect-pointwise"])
    assert "its last): 0 of 2 access(es) conflicted" in out
    assert "S13  store  xs  4 B  1x32 lanes  worst 1  xs[threadIdx.x]" in out


def test_inspect_json(ran):
    page = json.loads(ok(ran["inspect-json"]))
    kernel = page["kernels"][0]
    assert kernel["launch"]["grid"] == {"symbolic": ["ceildiv(M, 16)", "ceildiv(N, 16)", "1"],
                                        "value": [2, 2, 1]}
    assert [a["bytes"] for a in kernel["shared"]["allocations"]] == [[0, 512], [512, 1024]]
    assert kernel["shared"]["total"] == 1024 and kernel["shared"]["overlaps"] == []
    assert [b["id"] for b in kernel["barriers"]] == ["sync1"]
    assert kernel["ptxas"]["registers"] > 0 and kernel["ptxas"]["spill_stores"] == 0
    bank = kernel["bank_conflicts"]
    assert bank["block"] == [0, 0, 0] and bank["needs_sizes"] == []
    assert [(a["label"], a["kind"], a["buffer"], a["worst"]) for a in bank["accesses"]] == \
        [("S13", "store", "As", 1), ("S16", "store", "Bs", 4), ("S20", "load", "As", 1),
         ("S20", "load", "Bs", 4)]
    assert bank["conflicted"] == 2 and bank["unknown"] == 0
    assert page["verifier"]["refused"] and page["verifier"]["hazards"] > 0


# ---------------------------------------------------------------------------------------
# graph
# ---------------------------------------------------------------------------------------

command("graph", "graph", TILED)
command("graph-kernel", "graph", TILED, "--stage", "kernel", "-o", "{tmp}/kernel.dot")


def test_graph_fusion_dot_to_stdout(ran):
    out = ok(ran["graph"])
    assert out.startswith('digraph "splitk_nt" {') and out.rstrip().endswith("}")
    assert 't_A [shape=box, label="A (input)\\nf16[K, M] global' in out
    assert 'label="matmul(As, Bs, layout=NT)"' in out
    assert "t_A -> e" in out and "-> t_As;" in out


def test_graph_kernel_dot_file(ran):
    assert ok(ran["graph-kernel"]) == ""
    text = (ran["tmp"] / "kernel.dot").read_text()
    assert text.startswith('digraph "splitk_nt" {')
    assert 'S17 [label="S17: __syncthreads() [sync1]\\nRAW on As: S13 -> S20' in text
    assert "S20 -> S13 [style=dashed, color=red" in text


def _fake_dot(directory, exit_code=0):
    """A stand-in for Graphviz's `dot` that writes an SVG (or fails as dot does)."""
    directory.mkdir()
    script = directory / "dot"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "args = sys.argv[1:]\n"
        "text = sys.stdin.read()\n"
        f"if {exit_code}:\n"
        "    sys.stderr.write('Error: <stdin>: syntax error in line 1\\n')\n"
        f"    sys.exit({exit_code})\n"
        "assert text.startswith('digraph')\n"
        "open(args[args.index('-o') + 1], 'w').write('<svg>' + args[0] + '</svg>')\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return directory


def test_graph_svg_through_graphviz_and_without_it(tmp_path):
    svg = tmp_path / "fusion.svg"
    with_dot = fuserir("graph", TILED, "-o", svg, env={"PATH": str(_fake_dot(tmp_path / "a"))})
    ok(with_dot)
    assert svg.read_text() == "<svg>-Tsvg</svg>"

    failing = fuserir("graph", TILED, "-o", tmp_path / "x.svg",
                      env={"PATH": str(_fake_dot(tmp_path / "b", exit_code=1))})
    assert failing.returncode == 1
    assert failing.stderr == (f"fuserir: error: -o {tmp_path / 'x.svg'}: Graphviz's dot "
                              "failed: Error: <stdin>: syntax error in line 1\n")

    empty = tmp_path / "empty"
    empty.mkdir()
    without = fuserir("graph", TILED, "-o", tmp_path / "y.svg", env={"PATH": str(empty)})
    assert without.returncode == 1
    assert without.stderr == (f"fuserir: error: -o {tmp_path / 'y.svg'}: Graphviz is not "
                              "installed (no 'dot' program on PATH); write DOT with -o "
                              "FILE.dot, or install graphviz\n")
    assert not (tmp_path / "y.svg").exists()


# ---------------------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------------------

command("check", "check", TILED, "--size", SMALL)
command("check-drop", "check", TILED, "--size", SMALL, "--drop", "sync1")
command("check-without", "check", TILED, "--size", SMALL, "--without", "insert_syncs",
        "--json")
command("check-blocks", "check", TILED, "--size", "M=160,N=160,K=64,splitk=2",
        "--blocks", "0,0,0;9,9")

command("check-auto-drop", "check", EXAMPLES / "bias_relu_matmul.fz", "--size",
        "M=136,N=72,K=200", "--drop", "sync1", "--json")


def test_check_plain_finds_no_hazards(ran):
    out = ok(ran["check"])
    assert "verifier (pass verify_hazards): no hazards" in out
    assert "interpreter (all 4 block(s), integer-valued inputs, seed 0): no hazards" in out
    assert "output out: 360 element(s) compared, equal to the reference" in out
    assert out.splitlines()[-1] == "no hazards"


def test_check_verifies_the_kernel_it_interprets(ran):
    """An automatic schedule at the given sizes: the verifier's refusal and the
    interpreter's report are on the one kernel those sizes plan (not, for the verifier,
    the kernel compile() builds for unknown large sizes, whose sync1 is another sync)."""
    result = ran["check-auto-drop"]
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    verified = {h[k] for h in report["verifier"]["hazards"] for k in ("first", "second")}
    seen = {h[k] for h in report["interpreter"]["hazards"] for k in ("first", "second")}
    assert seen and seen <= verified, (seen, verified)


def test_check_drop_sync1_reports_the_raw_race_on_as(ran):
    result = ran["check-drop"]
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "(dropped sync1)" in out.splitlines()[0]
    assert "verifier (pass verify_hazards) refuses the kernel: 2 hazard(s)" in out
    assert "1. RAW on As, bytes [0, 512) (the whole buffer" in out
    assert "interpreter (all 4 block(s), integer-valued inputs, seed 0): 2 hazard(s)" in out
    assert "1. RAW on As, bytes [0, 2)" in out
    assert "first:  S13: As[((threadIdx.y * 16) + i2)] = A[" in out
    assert "second: S20: partial_acc[0] = " in out
    assert "threads (0, 0, 0) and (1, 0, 0)" in out
    assert out.splitlines()[-1] == "4 hazard(s)"


def test_check_without_insert_syncs_reports_verifier_and_interpreter_hazards(ran):
    result = ran["check-without"]
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    verifier = report["verifier"]["hazards"]
    interp = report["interpreter"]["hazards"]
    assert verifier and interp and not report["ok"]
    assert {h["kind"] for h in verifier} == {"RAW", "WAR"}
    assert {(h["kind"], h["buffer"]) for h in interp} >= {("RAW", "As"), ("WAR", "Bs")}
    for h in interp:
        assert h["bytes"] and h["threads"] and h["block"] == [0, 0, 0]
        assert h["first"].startswith("S") and h["second"].startswith("S")


def test_check_selected_blocks_at_a_bigger_size(ran):
    out = ok(ran["check-blocks"])
    assert "interpreter (2 of 100 block(s)" in out
    assert "output out: 512 element(s) compared, equal to the reference" in out


# ---------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------

command("run", "run", TILED, "--size", SMALL, "--backend", "interp")
command("run-json", "run", POINTWISE, "--size", "M=2,N=130", "--backend", "interp", "--json")
command("run-cuda", "run", TILED, "--backend", "cuda", "--size", SMALL, "--repeat", "5")


def test_run_in_the_interpreter_compares_with_the_reference(ran):
    out = ok(ran["run"])
    assert out.startswith("run splitk_nt on the CPU interpreter at K=40, M=20, N=18, splitk=2")
    assert "out: f16[20, 18]  max abs error 0  max rel error 0  (rtol 2^-10)  ok" in out
    assert ("cuBLAS ratio: not measured: the cuBLAS baseline needs the cuda backend on a GPU "
            "(this run used the CPU interpreter)" in out)
    report = json.loads(ok(ran["run-json"]))
    assert report["ok"] and report["outputs"]["out"]["mismatches"] == 0
    assert report["outputs"]["out"]["compared"] == 260 and "cublas" not in report


def test_run_json_without_a_gpu_says_why_there_is_no_cublas_figure(tmp_path):
    result = fuserir("run", TILED, "--size", SMALL, "--backend", "interp", "--json")
    report = json.loads(ok(result))
    assert report["cublas"] == {"note": "not measured: the cuBLAS baseline needs the cuda "
                                        "backend on a GPU (this run used the CPU interpreter)"}


@pytest.mark.gpu
def test_run_on_cuda_measures_the_cublas_baseline():
    out = ok(fuserir("run", TILED, "--backend", "cuda", "--size", "M=512,N=256,K=1024,splitk=2",
                     "--repeat", "5"))
    line = next(x for x in out.splitlines() if x.startswith("  cuBLAS ratio: "))
    ratio = float(line.split()[2].rstrip("x"))
    assert ratio > 0 and "x cuBLAS's speed (cuBLAS median " in line
    assert "matmul, timed the same way)" in line
    report = json.loads(ok(fuserir("run", TILED, "--backend", "cuda", "--size",
                                   "M=512,N=256,K=1024,splitk=2", "--repeat", "5", "--json")))
    cublas = report["cublas"]
    assert cublas["library"] in ("torch", "cupy") and cublas["time_us"] > 0
    assert cublas["ratio"] == pytest.approx(cublas["time_us"] / report["timing"]["median_us"])


def test_run_on_cuda(ran):
    result = ran["run-cuda"]
    if GPU:
        out = ok(result)
        assert "on the GPU" in out and "time: median " in out
    else:
        assert result.returncode == 1
        assert result.stderr.startswith("fuserir: error: --backend cuda needs an NVIDIA GPU, "
                                        "and none is available here")
        assert result.stderr.rstrip().endswith("; use --backend interp")
        assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------
# FUSERIR_DUMP, python -m, the console script
# ---------------------------------------------------------------------------------------

command("env-dump", "run", TILED, "--size", "M=4,N=4,K=4,splitk=1", "--backend", "interp",
        env={"FUSERIR_DUMP": "fusion,scheduled,kernel,cuda,ptx",
             "FUSERIR_DUMP_AFTER": "allocation,inline_defaults"})


def test_fuserir_dump_environment_prints_every_stage_during_compile(ran):
    result = ran["env-dump"]
    assert ok(result).splitlines()[-1] == "ok"
    headers = [line for line in result.stderr.splitlines() if line.startswith("=====")]
    assert headers == [f"===== fuserir dump: {what} (splitk_nt) =====" for what in (
        "fusion", "scheduled", "after pass inline_defaults", "after pass allocation",
        "kernel", "cuda", "ptx")]
    assert "__syncthreads() [sync1]  // RAW on As" in result.stderr
    assert ".entry splitk_nt_kernel(" in result.stderr


def test_fuserir_dump_environment_in_the_python_api():
    code = ("import codegen, fuserir; "
            f"codegen.compile(fuserir.dsl.parse_file({str(TILED)!r}), backend='interp')")
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**env, "FUSERIR_DUMP": "kernel"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("===== fuserir dump: kernel (splitk_nt) =====\n"
                                    "kernel splitk_nt(")


@pytest.mark.skipif(_console_script() is None, reason="the console script is not installed")
def test_console_script_is_the_same_command(ran):
    script = fuserir("dump", "--list-passes", module=False)
    assert ok(script) == ok(ran["list-passes"])


# ---------------------------------------------------------------------------------------
# Errors: one clear line, exit 1
# ---------------------------------------------------------------------------------------

ERRORS = [
    (("parse", "missing.fz"), None, "fuserir: error: cannot read missing.fz: No such file"),
    (("inspect", "missing.fz"), None, "fuserir: error: cannot read missing.fz: No such file"),
    (("eval", "softmax.fz", "--size", "M"), None, "--size: expected NAME=VALUE, got 'M'"),
    (("eval", "softmax.fz", "--size", "M=x"), None, "--size: M must be an integer, got 'x'"),
    (("eval", "softmax.fz", "--size", "M=0"), None, "--size: M must be >= 1, got 0"),
    (("eval", "softmax.fz", "--size", "M=99999999999999999999"), None,
     "--size: M=99999999999999999999 does not fit in 64 bits (at most 9223372036854775807)"),
    (("check", "softmax.fz", "--size", "N=99999999999999999999"), None,
     "--size: N=99999999999999999999 does not fit in 64 bits (at most 9223372036854775807)"),
    (("eval", "softmax.fz", "--size", "M=1e3"), None, "--size: M must be an integer, got '1e3'"),
    (("eval", "softmax.fz", "--size", "M=9999999999999"), None,
     "--size: input x is f32[9999999999999, 19] at M=9999999999999, N=19: 189999999999981 "
     "elements (759999999999924 bytes), too many to allocate here"),
    (("eval", "softmax.fz", "--size", "Q=4"), None,
     "--size: fusion softmax has no size named Q"),
    (("check", "splitk_tiled.fz", "--size", "Q=4"), None,
     "--size: fusion splitk_nt has no size named Q (it has: K, M, N, splitk)"),
    (("eval", "softmax.fz", "--fusion", "nope"), None, "softmax.fz has no fusion 'nope'"),
    (("frobnicate",), None, "argument COMMAND: invalid choice: 'frobnicate'"),
    (("dump",), None, "fuserir: error: dump: FILE is required (or --list-passes)"),
    (("dump", "softmax.fz", "--stage", "sass"), None, "argument --stage: invalid choice"),
    (("dump", "splitk_tiled.fz", "--after", "nope"), None,
     "--after: unknown pass 'nope'; the passes are: " + ", ".join(PASSES)),
    (("dump", "splitk_tiled.fz", "--stage", "cuda", "--after", "indexing"), None,
     "--after goes with --stage kernel, not --stage cuda"),
    (("dump", "splitk_tiled.fz", "--stage", "ptx", "--arch", "sm_1"), None,
     "--arch: arch 'sm_1': NVRTC"),
    (("dump", "--list-passes", "softmax.fz"), None, "dump --list-passes takes no FILE"),
    (("graph", "splitk_tiled.fz", "-o", "out.txt"), None,
     "-o out.txt: unknown format '.txt'; use .dot, .gv, .svg, .png, .pdf"),
    (("check", "splitk_tiled.fz", "--drop", "sync9"), None,
     "drop_syncs: kernel splitk_nt has no barrier sync9 (it has: sync1, sync2)"),
    (("check", "splitk_tiled.fz", "--without", "validate"), None,
     "--without: pass 'validate' cannot be left out (only insert_syncs, verify_hazards can)"),
    (("check", "splitk_tiled.fz", "--without", "nope"), None, "--without: unknown pass 'nope'"),
    (("check", "splitk_tiled.fz", "--blocks", "0,x"), None,
     "--blocks: expected X,Y,Z;X,Y,Z;..., got '0,x'"),
    (("check", "splitk_tiled.fz", "--blocks", "5,0,0"), None,
     "--blocks: block (5, 0, 0) is outside the grid (3, 3, 1)"),
    (("run", "splitk_tiled.fz", "--repeat", "0"), None, "--repeat: must be >= 1, got 0"),
    (("run", "splitk_tiled.fz", "--size", "M=2,N=2,K=2"), {"FUSERIR_DUMP": "kernl"},
     "FUSERIR_DUMP: unknown name 'kernl'; expected a comma-separated list of: fusion, "
     "scheduled, kernel, cuda, ptx"),
    (("check", "splitk_tiled.fz"), {"FUSERIR_DUMP_AFTER": "x"},
     "FUSERIR_DUMP_AFTER: unknown name 'x'; expected a comma-separated list of: "
     "narrow_vectors, inline_defaults,"),
    (("inspect", "{tmp}/tidy.fz"), None,
     "fuserir: error: s: reduction axis 1 is bound to TIDz; block reductions are supported "
     "over TIDx or TIDy"),
]
for i, (args, env, _) in enumerate(ERRORS):
    command(f"error-{i}", *args, env=env, cwd=EXAMPLES)


@pytest.mark.parametrize("i", range(len(ERRORS)), ids=[" ".join(e[0]) for e in ERRORS])
def test_bad_command_line_input_is_one_clear_line(ran, i):
    result = ran[f"error-{i}"]
    assert result.returncode == 1, result.stdout
    assert ERRORS[i][2] in result.stderr
    assert result.stderr.startswith("fuserir: error: ")
    assert len(result.stderr.strip().splitlines()) == 1


SUBCOMMANDS = ["parse", "dump", "inspect", "graph", "check", "run"]
for name in SUBCOMMANDS:
    command(f"two-{name}", name, "{tmp}/two.fz")
    command(f"bad-{name}", name, "{tmp}/bad.fz")


@pytest.mark.parametrize("name", SUBCOMMANDS[1:])
def test_a_file_of_several_fusions_needs_fusion(ran, name):
    result = ran[f"two-{name}"]
    assert result.returncode == 1
    assert result.stderr == (f"fuserir: error: {ran['tmp'] / 'two.fz'} defines 2 fusions "
                             "(a, b); pick one with --fusion NAME\n")


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_dsl_error_reports_location_and_caret(ran, name):
    result = ran[f"bad-{name}"]
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"fuserir: error: {ran['tmp'] / 'bad.fz'}:2:7: ")
    assert "frobnicate" in lines[0]
    assert lines[1].strip() == "y = frobnicate(x)" and lines[2].strip() == "^"


command("latin1-parse", "parse", "{tmp}/latin1.fz")
command("latin1-check", "check", "{tmp}/latin1.fz")
command("bom-parse", "parse", "{tmp}/bom.fz")
command("deep-parse", "parse", "{tmp}/deep.fz")
command("deep-eval", "eval", "{tmp}/deep.fz", "--size", "N=4", "--json")


@pytest.mark.parametrize("name", ["latin1-parse", "latin1-check"])
def test_a_file_that_is_not_utf8_is_a_located_error(ran, name):
    result = ran[name]
    assert result.returncode == 1
    assert result.stderr == (f"fuserir: error: {ran['tmp'] / 'latin1.fz'}:2:19: invalid "
                             "UTF-8 (byte 0xe9); a DSL file is UTF-8 text\n"
                             "      y = x + 1  # caf\ufffd\n"
                             f"    {' ' * 18}^\n")


def test_a_byte_order_mark_is_allowed(ran):
    assert ok(ran["bom-parse"]) == "fusion a(x: f32[N]) {\n  y = x * 2.0\n  output y\n}\n"


def test_a_long_sum_parses_prints_and_evaluates(ran):
    assert ok(ran["deep-parse"]) == DEEP
    report = json.loads(ok(ran["deep-eval"]))
    assert report["deep"]["outputs"]["y"]["shape"] == [4]


command("two-pick", "dump", "{tmp}/two.fz", "--fusion", "b", "--stage", "fusion")
command("tidy-placed", "dump", "{tmp}/tidy.fz", "--after", "inline_defaults")


def test_fusion_picks_one_and_a_refused_schedule_still_shows_its_placement(ran):
    assert ok(ran["two-pick"]) == "fusion b(x: f32[N]) {\n  y = x + 1.0\n  output y\n}\n"
    assert "s: f32[M] global loop=[iBIDx{M} rTIDz{N}]" in ok(ran["tidy-placed"])


def test_matmul_schedule_statement_errors_are_located(tmp_path):
    seed = write(tmp_path, "seed.fz",
                 "fusion f(A: f16[K, M], B: f16[K, N]) {\n"
                 "  acc = matmul(A, B, layout=NT)\n  out = cast(acc, f16)\n  output out\n}\n"
                 "schedule f {\n  matmul(cta_tile=[256, 128, 32], splitk=5, warps=8)\n}\n")
    result = fuserir("parse", seed)
    assert result.returncode == 1
    assert f"{seed}:7:45:" in result.stderr and "matmul has no parameter 'warps'" in \
        result.stderr


def test_running_out_of_host_memory_is_a_usage_error(monkeypatch, capsys):
    from fuserir import cli

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(cli.basic, "evaluate", exhausted)
    assert cli.main(["eval", str(SOFTMAX)]) == 1
    assert capsys.readouterr().err == ("fuserir: error: out of host memory (are the sizes, "
                                       "--size, too large?)\n")
