"""Progress bars for long operations: interpreter runs, plans (scheduling, lowering,
proofs, NVRTC) and the benchmark matrices.

    with progress("interpreting mm", total=blocks, unit="block") as bar:
        ... bar.update() ...

A bar is tqdm's, on stderr, shown only once the operation has lasted a second
(DELAY_S) and only where stderr is a terminal, so tests, pipes and logs stay clean.
FUSERIR_PROGRESS=1 shows bars anyway (from the start), FUSERIR_PROGRESS=0 never. tqdm is
imported when a bar may be shown, not before. It sits at the bottom layer, with no
dependency on the compiler, so that every layer above may report its progress.
"""

import os
import sys

DELAY_S = 1.0
ENV = "FUSERIR_PROGRESS"


class _Silent:
    """What progress() gives where no bar is shown: every call does nothing."""

    def update(self, n=1):
        pass

    def set_postfix_str(self, text):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def progress(description, total=None, unit="it"):
    """A bar for an operation of `total` steps (None: unknown, a count is shown) named
    `description`; a context manager with update(n) and set_postfix_str(text)."""
    mode = os.environ.get(ENV, "")
    if mode == "0" or (mode != "1" and not _interactive()):
        return _Silent()
    from tqdm import tqdm
    return tqdm(total=total, desc=description, unit=unit, file=sys.stderr, leave=False,
                delay=0 if mode == "1" else DELAY_S, dynamic_ncols=True)


def _interactive():
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
