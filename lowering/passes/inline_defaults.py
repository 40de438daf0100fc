"""Pass `inline_defaults`: place every tensor that no compute_at placed.

Intermediates the schedule did not place are inlined as far as
legal (transforms.inline_most; docs/decisions.md says why the rule keys on placement, not
on names). It works on lowering's private copy of the fusion, never on the user's.
"""

from fuserir import transforms

from ..contract import Pass


def run(ctx, kernel):
    transforms.inline_most(ctx.fusion)
    return kernel


PASS = Pass("inline_defaults", run, __doc__, provides=("placement",),
            why="every later pass reads compute-at positions")
