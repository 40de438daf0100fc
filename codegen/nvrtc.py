"""CUDA source -> cubin through CuPy's NVRTC binding, with an in-memory and a disk cache.
NVRTC comes with the cuda13 or cuda12 extra (codegen.gpu_stack loads it on first use and
says what to install where it is missing); emitting CUDA source needs none of it.

    compile_to_cubin(source, name, arch=None, options=()) -> bytes (an ELF cubin)
    ptx(source, name, arch=None, options=()) -> str          (for dumps)
    ptxas_info(source, name, arch=None, options=()) -> dict  (registers, spills, ...)
    nvrtc_version() -> (major, minor)
    default_arch() -> "sm_XY" of the current GPU, or sm_90 where there is none

Every compile runs `-arch=sm_XY --std=c++17 -lineinfo` plus the caller's options; no GPU
is needed (NVRTC 13.x and 12.x compile sm_90 cubins on a CPU-only machine, and they
load on the H200's driver). A failure raises codegen.errors.CompileError with
NVRTC's log and the generated lines each error points at. So does a cubin that ptxas
built but made slow in a way a schedule must not accept: the warnings of
FAILING_WARNINGS (setmaxnreg ignored, wgmma serialized) fail that kernel's build, with
ptxas's own lines; such a cubin is never cached.

Cache. A compile is keyed by sha256 of (source, program name, options, arch, NVRTC version,
fuserir version, cache format). Hits come from a per-process dict, then from the disk:
cache_root()/cubin/ (codegen.disk_cache: $FUSERIR_CACHE_DIR, else
$XDG_CACHE_HOME/fuserir, else ~/.cache/fuserir), one checked entry per key, written
atomically; an entry that does not check out is recompiled and rewritten, never trusted.
The disk cache is an optimisation only: where the directory cannot be written, compiles
still work.
"""

import functools
import hashlib
import json
import re
import threading

import fuserir

from .disk_cache import Entries, cache_root
from . import gpu_stack
from .errors import CompileError

__all__ = ["compile_to_cubin", "ptx", "ptxas_info", "nvrtc_version", "default_arch",
           "cache_dir", "cache_key", "clear_memory_cache", "stats", "BASE_OPTIONS"]

DEFAULT_ARCH = "sm_90"
BASE_OPTIONS = ("--std=c++17", "-lineinfo")
ELF_MAGIC = b"\x7fELF"

_MAGIC = b"fuserir-cubin\x02"          # file magic; the last byte is the format version
_ENTRIES = Entries(_MAGIC)

_memory = {}
_lock = threading.Lock()
# Counters for tests and diagnostics: compiles run, hits by level, disk entries rejected.
stats = {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "disk_rejects": 0,
         "disk_write_errors": 0}


def _nvrtc():
    return gpu_stack.nvrtc()        # GpuUnavailableError, saying what to install, if absent


@functools.cache
def nvrtc_version():
    """(major, minor) of the NVRTC library CuPy loaded."""
    return tuple(int(v) for v in _nvrtc().getVersion())


@functools.cache
def supported_archs():
    """The sm_ numbers this NVRTC can target, e.g. (75, 80, ..., 90, 100, ...)."""
    return tuple(int(a) for a in _nvrtc().getSupportedArchs())


@functools.cache
def default_arch():
    """sm_XY of the current device, or sm_90 where no GPU answers. A device newer than
    NVRTC knows gets the newest supported arch of its major version (a cubin runs on
    later minors of the same major)."""
    try:
        import cupy
        cc = int(cupy.cuda.Device().compute_capability)
    except Exception:  # noqa: BLE001 - no driver, no device: compile for the H200
        return DEFAULT_ARCH
    archs = supported_archs()
    if cc in archs:
        return f"sm_{cc}"
    same_major = [a for a in archs if a // 10 == cc // 10 and a <= cc]
    return f"sm_{max(same_major)}" if same_major else DEFAULT_ARCH


def normalize_arch(arch):
    """"sm_90" / "90" / 90 / None (the default) -> "sm_90" (arch suffixes a/f are kept)."""
    if arch is None:
        return default_arch()
    text = str(arch)
    m = re.fullmatch(r"(?:sm_)?(\d+)([af]?)", text)
    if not m:
        raise ValueError(f"arch {arch!r}: expected sm_XY (a real architecture: a cubin "
                         f"cannot be built for a virtual compute_XY)")
    if int(m.group(1)) not in supported_archs():
        raise ValueError(f"arch {arch!r}: NVRTC {'.'.join(map(str, nvrtc_version()))} "
                         f"supports sm_{', sm_'.join(map(str, supported_archs()))}")
    return f"sm_{m.group(1)}{m.group(2)}"


def cache_dir():
    """Where cubins are cached: cache_root()/cubin."""
    return cache_root() / "cubin"


def cache_key(source, name, arch, options):
    """Hex sha256 naming one compile (arch already normalized, options complete)."""
    blob = json.dumps([_MAGIC.hex(), source, name, arch, list(options), nvrtc_version(),
                       fuserir.__version__])
    return hashlib.sha256(blob.encode()).hexdigest()


def clear_memory_cache():
    with _lock:
        _memory.clear()


def _all_options(arch, options):
    return [f"-arch={arch}", *BASE_OPTIONS, *options]


# ptxas warnings that make a cubin unacceptable: it runs, but not as the kernel was built
# to (NVIDIA's codes; the text is ptxas's, quoted in the error)
FAILING_WARNINGS = {
    "C7508": "setmaxnreg was ignored: the kernel needs __launch_bounds__(threads, 1)",
    "C7509": "wgmma was serialized (a function call in the wgmma pipeline)",
    "C7510": "wgmma was serialized (a function call between wgmma and its wait)",
    "C7511": "wgmma was serialized for lack of registers",
}
_WARNING = re.compile(r"^ptxas\s+warning\s*:\s*\((C\d{4})\)(.*)$", re.M)


def check_warnings(log, name, options=(), source=""):
    """Raise CompileError when NVRTC's log holds a warning of FAILING_WARNINGS."""
    found = [(code, text.strip()) for code, text in _WARNING.findall(log)
             if code in FAILING_WARNINGS]
    if found:
        lines = [f"  {code}: {FAILING_WARNINGS[code]} (ptxas: {text})" for code, text in found]
        raise CompileError(f"ptxas built kernel {name} but warned that it will not run as "
                           "built:\n" + "\n".join(lines), log=log, source=source, name=name,
                           options=options)


def compile_to_cubin(source, name, arch=None, options=(), cache=True):
    """The cubin (ELF bytes) of `source`; `name` names the program (`<name>.cu` in
    messages and line info) and is normally the kernel's name. cache=False skips the disk
    cache (the in-memory one still answers)."""
    arch = normalize_arch(arch)
    opts = _all_options(arch, options)
    key = cache_key(source, name, arch, opts)
    with _lock:
        hit = _memory.get(key)
        if hit is not None:
            stats["memory_hits"] += 1
            return hit
    path = cache_dir() / f"{key}.cubin" if cache else None
    cubin, rejected = (_ENTRIES.read(path, key, name, check=lambda c: c.startswith(ELF_MAGIC))
                       if path is not None else (None, False))
    stats["disk_rejects"] += rejected
    if cubin is not None:
        stats["disk_hits"] += 1
    else:
        cubin, log = _compile(source, name, opts, want="cubin")
        check_warnings(log, name, opts, source)
        stats["compiles"] += 1
        if path is not None and not _ENTRIES.write(path, key, name, cubin):
            stats["disk_write_errors"] += 1
    with _lock:
        _memory[key] = cubin
    return cubin


def ptx(source, name, arch=None, options=()):
    """The PTX NVRTC generates for `source` (text, for dumps; not cached)."""
    opts = _all_options(normalize_arch(arch), options)
    return _compile(source, name, opts, want="ptx")[0]


def ptxas_info(source, name, arch=None, options=()):
    """What ptxas reports for kernel `name` (`-Xptxas -v`): a dict with registers,
    barriers, stack_frame, spill_stores, spill_loads (bytes), shared (static shared bytes,
    0 for dynamic-only kernels) and the full log."""
    opts = _all_options(normalize_arch(arch), tuple(options) + ("-Xptxas", "-v"))
    _, log = _compile(source, name, opts, want="cubin")
    return parse_ptxas_log(log, name)


def parse_ptxas_log(log, name):
    sections = re.split(r"^ptxas info\s*: Function properties for ", log, flags=re.M)
    info = {"registers": None, "barriers": None, "stack_frame": None, "spill_stores": None,
            "spill_loads": None, "shared": 0, "log": log}
    body = next((s for s in sections[1:] if s.split("\n", 1)[0].strip() == name),
                sections[1] if len(sections) > 1 else "")
    patterns = {"registers": r"Used (\d+) registers", "barriers": r"used (\d+) barriers",
                "stack_frame": r"(\d+) bytes stack frame",
                "spill_stores": r"(\d+) bytes spill stores",
                "spill_loads": r"(\d+) bytes spill loads", "shared": r"(\d+) bytes smem"}
    for key, pattern in patterns.items():
        m = re.search(pattern, body)
        if m:
            info[key] = int(m.group(1))
    return info


# ---------------------------------------------------------------------------------------
# NVRTC
# ---------------------------------------------------------------------------------------

def _compile(source, name, options, want):
    nvrtc = _nvrtc()
    program = f"{name}.cu"
    prog = nvrtc.createProgram(source, program, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(options))
        except nvrtc.NVRTCError as e:
            log = _log(nvrtc, prog)
            try:
                ptx_text = _text(nvrtc.getPTX(prog))
            except Exception:  # noqa: BLE001 - front-end errors leave no PTX
                ptx_text = ""
            raise CompileError(_failure_message(program, options, log, source, ptx_text, e),
                               log=log, source=source, name=name,
                               options=options) from None
        log = _log(nvrtc, prog)
        if want == "ptx":
            return _text(nvrtc.getPTX(prog)), log
        cubin = bytes(nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)
    if not cubin.startswith(ELF_MAGIC):
        raise CompileError(f"NVRTC returned no cubin for {program} ({' '.join(options)})",
                           log=log, source=source, name=name, options=options)
    return cubin, log


def _text(data):
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    return data.rstrip("\x00")


def _log(nvrtc, prog):
    try:
        return _text(nvrtc.getProgramLog(prog)).strip()
    except Exception:  # noqa: BLE001
        return ""


_MAX_LOCATIONS = 12


def _context(lines, number, label, radius=2):
    """Lines number-radius .. number+radius (1-based) of `lines`, numbered, '>' on the line."""
    out = []
    for n in range(max(1, number - radius), min(len(lines), number + radius) + 1):
        mark = ">" if n == number else " "
        out.append(f"  {mark} {label}{n:>5} | {lines[n - 1]}")
    return out


def _failure_message(program, options, log, source, ptx_text, exc):
    text = [f"NVRTC could not compile {program} ({' '.join(options)}): {exc}", "",
            "NVRTC log:", *("    " + line for line in log.splitlines()), ""]
    src_lines = source.splitlines()
    seen = []
    for m in re.finditer(rf"^{re.escape(program)}\((\d+)\): (?:catastrophic )?error",
                         log, flags=re.M):
        n = int(m.group(1))
        if n not in seen:
            seen.append(n)
    for n in seen[:_MAX_LOCATIONS]:
        text.append(f"generated source {program}:{n}:")
        text += _context(src_lines, n, "")
    # ptxas errors point at PTX lines; -lineinfo's .loc directives lead back to CUDA lines.
    ptx_lines = ptx_text.splitlines()
    ptx_seen = []
    for m in re.finditer(r"ptx input, line (\d+); error", log):
        n = int(m.group(1))
        if n not in ptx_seen:
            ptx_seen.append(n)
    for n in ptx_seen[:_MAX_LOCATIONS]:
        if not 1 <= n <= len(ptx_lines):
            continue
        text.append(f"PTX line {n}:")
        text += _context(ptx_lines, n, "ptx ")
        cuda_line = _cuda_line_of_ptx(ptx_lines, n)
        if cuda_line is not None and 1 <= cuda_line <= len(src_lines):
            text.append(f"  which comes from generated source {program}:{cuda_line}:")
            text += _context(src_lines, cuda_line, "")
    if not seen and not ptx_seen:
        text.append("(no line numbers in the log; the generated source follows)")
        text += [f"  {i:>5} | {line}" for i, line in enumerate(src_lines, 1)]
    return "\n".join(text)


def _cuda_line_of_ptx(ptx_lines, n):
    for line in reversed(ptx_lines[:n]):
        m = re.match(r"\s*\.loc\s+\d+\s+(\d+)", line)
        if m:
            return int(m.group(1))
    return None
