"""Errors of the static verifier and of the interpreter: the hazards each one found.

They carry every hazard found (not just the first), each naming its kind, buffer, byte
range, the two program points (labelled kernel IR statements), the threads and loop
iterations involved, so a report reads like the story of the bug. They live in lowering
(the verifier raises HazardError) and codegen re-exports them with the interpreter's
RaceError, as the contract names them: codegen.RaceError, codegen.HazardError.
"""

from dataclasses import dataclass, field

from fuserir.errors import FuserirError


@dataclass
class Hazard:
    kind: str                 # RAW, WAR, WAW, async-pending, stale-read, uninitialized-read,
                              # cannot-prove (lowering.verify.async_protocol refuses the kernel),
                              # barrier-divergence, deadlock, cross-cta, mbarrier,
                              # mbarrier-init, proxy-fence, wgmma-registers, wgmma-fence,
                              # workspace (a zeroed workspace left non-zero),
                              # cluster (a cluster's shared memory read unordered)
    buffer: str
    first: str                # the earlier access: "S12: xs[threadIdx.x] = ..."
    second: str               # the later access
    byte_range: tuple = None  # (first byte, one past the last byte) in the buffer's memory
    threads: tuple = None     # (thread of first, thread of second), each (x, y, z)
    iterations: tuple = None  # ({loop var: value}, {loop var: value})
    block: tuple = None       # the block (x, y, z) where it was seen
    detail: str = ""
    extra: dict = field(default_factory=dict)

    def __str__(self):
        parts = [f"{self.kind} on {self.buffer}"]
        if self.byte_range is not None:
            parts.append(f"bytes [{self.byte_range[0]}, {self.byte_range[1]})")
        text = " ".join(parts) + f"\n    first:  {self.first}\n    second: {self.second}"
        if self.threads is not None:
            text += f"\n    threads {self.threads[0]} and {self.threads[1]}"
        if self.iterations is not None:
            text += f"; iterations {self.iterations[0]} and {self.iterations[1]}"
        if self.block is not None:
            text += f"; block {self.block}"
        if self.detail:
            text += f"\n    {self.detail}"
        return text


class RaceError(FuserirError):
    """The interpreter observed hazards; `.hazards` lists all of them."""

    def __init__(self, hazards, kernel_name=""):
        self.hazards = list(hazards)
        self.kernel_name = kernel_name
        what = f" in kernel {kernel_name}" if kernel_name else ""
        body = "\n".join(f"  {i + 1}. {h}" for i, h in enumerate(self.hazards))
        grid = any(h.kind in ("cross-cta", "deadlock", "workspace", "cluster")
                   for h in self.hazards)
        memory = "" if grid else "shared-memory "
        super().__init__(f"{len(self.hazards)} {memory}hazard(s){what}:\n{body}")


class HazardError(RaceError):
    """The static verifier could not prove a kernel free of hazards; `.hazards` lists them."""


class LoweringError(FuserirError):
    """Bad arguments to lowering: an unknown pass, or a barrier id that does not exist."""
