"""NVRTC compilation: cubins, PTX, ptxas info, CompileError messages, the disk cache."""

import hashlib
import multiprocessing
import os

import pytest

import kir_examples as ex
from codegen import nvrtc
from codegen.cuda import emit_cuda
from codegen.errors import CompileError
from fuserir.errors import FuserirError

ARCH = "sm_90"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A private, empty disk cache and memory cache for each test."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(directory))
    nvrtc.clear_memory_cache()
    yield directory / "cubin"
    nvrtc.clear_memory_cache()


def unique_source(tag):
    """A small kernel whose text (so cache key) is unique to the test."""
    return ('extern "C" __global__ void k(float* x) {\n'
            f"  // {tag}\n"
            "  x[threadIdx.x] = x[threadIdx.x] * 2.0f;\n"
            "}\n")


def entries(directory):
    return sorted(p for p in directory.iterdir()) if directory.exists() else []


# -- compiling -----------------------------------------------------------------------------

def test_version_and_default_arch():
    major, minor = nvrtc.nvrtc_version()
    assert major >= 12 and minor >= 0
    assert nvrtc.default_arch().startswith("sm_")
    assert 90 in nvrtc.supported_archs()


@pytest.mark.parametrize("arch", ["sm_90", "90", 90, "sm_80"])
def test_arch_spellings(arch):
    cubin = nvrtc.compile_to_cubin(unique_source("arch"), "k", arch=arch)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("arch", ["compute_90", "sm_12", "hopper"])
def test_bad_arch_is_refused(arch):
    with pytest.raises(ValueError, match="arch"):
        nvrtc.compile_to_cubin(unique_source("bad arch"), "k", arch=arch)


def test_ptx_and_ptxas_info():
    kernel = ex.shared_reverse_kernel()
    source = emit_cuda(kernel)
    text = nvrtc.ptx(source, kernel.name, arch=ARCH)
    assert ".visible .entry shared_reverse(" in text and "bar.sync" in text
    info = nvrtc.ptxas_info(source, kernel.name, arch=ARCH)
    assert isinstance(info["registers"], int) and 0 < info["registers"] < 255
    assert info["barriers"] == 1
    assert info["spill_stores"] == 0 and info["spill_loads"] == 0
    assert "Function properties for shared_reverse" in info["log"]


# -- errors --------------------------------------------------------------------------------

BROKEN = "\n".join([
    'extern "C" __global__ void broken(float* x) {',   # 1
    "  int i = threadIdx.x;",                          # 2
    "  float a = x[i];",                               # 3
    "  x[i] = undefined_function(a);",                 # 4
    "  float b = a;",                                  # 5
    "  x[i] = b + no_such_variable;",                  # 6
    "}",                                               # 7
]) + "\n"


def test_compile_error_shows_the_log_and_the_offending_lines():
    with pytest.raises(CompileError) as info:
        nvrtc.compile_to_cubin(BROKEN, "broken", arch=ARCH)
    err = info.value
    assert isinstance(err, FuserirError)
    message = str(err)
    assert "NVRTC could not compile broken.cu (-arch=sm_90 --std=c++17 -lineinfo)" in message
    assert 'identifier "undefined_function" is undefined' in message
    assert 'identifier "no_such_variable" is undefined' in message
    assert "generated source broken.cu:4:" in message
    assert "  >     4 |   x[i] = undefined_function(a);" in message
    assert "        2 |   int i = threadIdx.x;" in message     # context before
    assert "generated source broken.cu:6:" in message
    assert "  >     6 |   x[i] = b + no_such_variable;" in message
    assert err.log and "undefined_function" in err.log
    assert err.source == BROKEN and err.name == "broken"
    assert "-arch=sm_90" in err.options


def test_ptxas_error_points_at_ptx_and_back_at_the_cuda_line():
    source = "\n".join([
        'extern "C" __global__ void bad_asm(float* x) {',
        "  float v = x[0];",
        '  asm volatile("bogus.instruction %0;" : "+f"(v));',
        "  x[0] = v;",
        "}",
    ]) + "\n"
    with pytest.raises(CompileError) as info:
        nvrtc.compile_to_cubin(source, "bad_asm", arch=ARCH)
    message = str(info.value)
    assert "ptxas" in message and "bogus" in message
    assert "PTX line" in message and "bogus.instruction" in message
    assert "which comes from generated source bad_asm.cu:3:" in message
    assert '  >     3 |   asm volatile("bogus.instruction %0;" : "+f"(v));' in message


def test_failed_compiles_are_not_cached(cache):
    for _ in range(2):
        with pytest.raises(CompileError):
            nvrtc.compile_to_cubin(BROKEN, "broken", arch=ARCH)
    assert entries(cache) == []


# -- the cache -----------------------------------------------------------------------------

def test_memory_and_disk_hits(cache):
    source = unique_source("hits")
    before = dict(nvrtc.stats)
    first = nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    assert nvrtc.stats["compiles"] == before["compiles"] + 1
    files = entries(cache)
    assert len(files) == 1 and files[0].suffix == ".cubin"
    assert files[0].read_bytes().endswith(first)

    again = nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    assert again == first
    assert nvrtc.stats["memory_hits"] == before["memory_hits"] + 1

    nvrtc.clear_memory_cache()
    from_disk = nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    assert from_disk == first
    assert nvrtc.stats["disk_hits"] == before["disk_hits"] + 1
    assert nvrtc.stats["compiles"] == before["compiles"] + 1


def test_key_covers_source_name_arch_and_options(cache):
    source = unique_source("key")
    nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    nvrtc.compile_to_cubin(source + "\n", "k", arch=ARCH)
    nvrtc.compile_to_cubin(source, "other", arch=ARCH)
    nvrtc.compile_to_cubin(source, "k", arch="sm_80")
    nvrtc.compile_to_cubin(source, "k", arch=ARCH, options=("-DFOO=1",))
    assert len(entries(cache)) == 5


def _corrupt_and_recompile(cache, damage):
    source = unique_source(f"damage {damage.__name__}")
    good = nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    (path,) = entries(cache)
    path.write_bytes(damage(path.read_bytes()))
    nvrtc.clear_memory_cache()
    before = dict(nvrtc.stats)
    cubin = nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    assert cubin == good
    assert nvrtc.stats["disk_rejects"] == before["disk_rejects"] + 1
    assert nvrtc.stats["compiles"] == before["compiles"] + 1
    # the entry was rewritten and is trusted again
    nvrtc.clear_memory_cache()
    assert nvrtc.compile_to_cubin(source, "k", arch=ARCH) == good
    assert nvrtc.stats["disk_hits"] == before["disk_hits"] + 1


def test_corrupt_entry_is_recompiled(cache):
    def flip_a_payload_byte(data):
        i = len(data) - 100
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    _corrupt_and_recompile(cache, flip_a_payload_byte)


def test_truncated_entry_is_recompiled(cache):
    def truncate(data):
        return data[: len(data) // 2]
    _corrupt_and_recompile(cache, truncate)


def test_entry_with_a_bad_header_is_recompiled(cache):
    def bad_header(data):
        return b"garbage" + data[7:]
    _corrupt_and_recompile(cache, bad_header)


def test_an_entry_holding_another_kernels_cubin_is_recompiled(cache):
    # a valid entry (header, hash, ELF) of another key, copied over this key's file: the
    # header names its own key and kernel, so it is refused, not served
    other = unique_source("another kernel")
    nvrtc.compile_to_cubin(other, "k", arch=ARCH)
    (other_path,) = entries(cache)
    stolen = other_path.read_bytes()
    other_path.unlink()

    def replace_with_another_entry(data):
        return stolen
    _corrupt_and_recompile(cache, replace_with_another_entry)


def test_an_entry_of_another_kernel_name_is_recompiled(cache):
    source = unique_source("renamed")
    nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    (path,) = entries(cache)
    data = path.read_bytes()
    nvrtc.clear_memory_cache()
    key = nvrtc.cache_key(source, "other", nvrtc.normalize_arch(ARCH),
                          nvrtc._all_options(nvrtc.normalize_arch(ARCH), ()))
    (path.parent / f"{key}.cubin").write_bytes(data)   # k's entry under other's key
    before = dict(nvrtc.stats)
    nvrtc.compile_to_cubin(source, "other", arch=ARCH)
    assert nvrtc.stats["disk_rejects"] == before["disk_rejects"] + 1
    assert nvrtc.stats["compiles"] == before["compiles"] + 1


def test_empty_entry_is_recompiled(cache):
    def empty(data):
        return b""
    _corrupt_and_recompile(cache, empty)


def test_unwritable_cache_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(blocker))
    before = nvrtc.stats["disk_write_errors"]
    cubin = nvrtc.compile_to_cubin(unique_source("unwritable"), "k", arch=ARCH)
    assert cubin[:4] == b"\x7fELF"
    assert nvrtc.stats["disk_write_errors"] == before + 1


def test_cache_false_skips_the_disk(cache):
    nvrtc.compile_to_cubin(unique_source("no disk"), "k", arch=ARCH, cache=False)
    assert entries(cache) == []


def _compile_in_child(source, cache_dir, barrier, results):
    os.environ["FUSERIR_CACHE_DIR"] = cache_dir
    from codegen import nvrtc as child_nvrtc
    barrier.wait(timeout=60)            # both processes compile at the same moment
    cubin = child_nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    results.put(hashlib.sha256(cubin).hexdigest() if cubin[:4] == b"\x7fELF" else "bad")


def test_two_processes_compiling_the_same_source(cache):
    source = unique_source("concurrent")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_compile_in_child,
                         args=(source, str(cache.parent), barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    digests = [results.get(timeout=5) for _ in procs]
    assert digests[0] == digests[1] != "bad"
    (path,) = entries(cache)                  # one entry, no temporary files left behind
    before = nvrtc.stats["disk_hits"]
    cubin = nvrtc.compile_to_cubin(source, "k", arch=ARCH)
    assert nvrtc.stats["disk_hits"] == before + 1
    assert hashlib.sha256(cubin).hexdigest() == digests[0]
