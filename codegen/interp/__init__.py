"""The CPU interpreter of kernel IR and its deterministic race detector (a second backend).

A package so that each part of the interpreter has a room of its own; this entry keeps
`from codegen.interp import ...` as it was (codegen.interp.machine holds it all for now).
"""

from codegen.interp.machine import (  # noqa: F401 (re-exported)
    _COMPOUND, InterpError, Wait, convert, run_kernel, schedule)

__all__ = ["run_kernel", "InterpError", "Wait", "schedule", "convert"]
