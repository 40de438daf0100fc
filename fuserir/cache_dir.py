"""Where fuserir keeps its caches on disk: $FUSERIR_CACHE_DIR, else $XDG_CACHE_HOME/fuserir
(an absolute XDG_CACHE_HOME only, as the XDG spec asks), else ~/.cache/fuserir.

Beside each other under it: lark/ (the DSL grammar's analysis, fuserir.dsl.syntax),
cubin/ (codegen.nvrtc), proofs/ and plans/ (the driver). It sits at the bottom layer so
that every layer finds the one directory; a cache is an optimisation only, and where it
cannot be written everything is built again.
"""

import os
from pathlib import Path


def cache_root():
    """The root of fuserir's caches on disk (see the module header)."""
    root = os.environ.get("FUSERIR_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "fuserir"
