"""`fuserir dump --size`: the kernels planned for those sizes (an unscheduled fusion's
automatic schedule is chosen at them, as `check` and `run` choose it)."""

from test_cli import fuserir

MATMUL = ("fusion mm(A: f16[K, M], B: f16[K, N]) {\n  acc = matmul(A, B, layout=NT)\n"
          "  out = cast(acc, f16)\n  output out\n}\n")


def test_dump_size_shows_the_schedule_planned_at_those_sizes(tmp_path):
    path = tmp_path / "mm.fz"
    path.write_text(MATMUL)
    small = fuserir("dump", path, "--stage", "scheduled", "--size", "M=64,N=64,K=64")
    deep_k = fuserir("dump", path, "--stage", "scheduled", "--size", "M=128,N=128,K=65536")
    assert small.returncode == deep_k.returncode == 0, small.stderr + deep_k.stderr
    assert small.stdout.startswith("# automatic schedule (mm has none of its own)")
    assert small.stdout != deep_k.stdout     # a long K plans another schedule
    cuda = fuserir("dump", path, "--stage", "cuda", "--size", "M=128,N=128,K=65536")
    assert cuda.returncode == 0 and "__global__" in cuda.stdout


def test_dump_size_names_an_unknown_size(tmp_path):
    path = tmp_path / "mm.fz"
    path.write_text(MATMUL)
    result = fuserir("dump", path, "--size", "Q=3")
    assert result.returncode != 0
    assert "--size: fusion mm has no size named Q (it has: K, M, N)" in result.stderr
