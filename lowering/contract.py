"""The pass contract: what each lowering pass reads and provides, and the checks of it.

Every module of lowering/passes ends with its record,

    PASS = Pass("allocation", run, __doc__, reads=("tensor_params", ...),
                provides=("buffers", ...), why="...")

naming the products it reads and the ones it provides. Most are the context's
(lowering.context.PRODUCTS), which the context also guards as lowering runs: reading one
before its pass has run raises ProductError. The others live in the kernel IR or the
fusion (IR_PRODUCTS below); the order check alone guards those. A pass's summary (its
docstring's first line) and `why` (why it sits where it does) are what `fuserir dump
--list-passes`, docs/passes.md and docs/cli.md show (tools/gen_pass_docs.py writes the docs
from these records).

check_order refuses a pipeline in which a pass reads a product that no earlier pass
provides, or two passes provide one product (lowering.pipeline runs it at import);
check_skipped refuses to leave out a pass whose product a pass that runs reads.
"""

import re
import textwrap
from dataclasses import dataclass
from typing import Callable

from .context import PRODUCTS
from .errors import LoweringError

IR_PRODUCTS = {
    "placement": "every tensor's compute-at position, on lowering's copy of the fusion",
    "kernel": "the kernel IR: parameters, launch configuration, the statement tree",
    "sync_ids": "the ids of the inserted barriers and waits: sync1, sync2, ...",
}


def meaning(product):
    """What a product (a name of PRODUCTS or IR_PRODUCTS) is."""
    return PRODUCTS.get(product) or IR_PRODUCTS[product]


class ContractError(LoweringError):
    """A pipeline whose order does not satisfy its passes' records."""


@dataclass(frozen=True)
class Pass:
    """One lowering pass: its name, `run(ctx, kernel) -> kernel`, its module's docstring,
    the products it reads and provides, whether a caller may disable it (`optional`),
    whether it is a step run only when asked (`on_request`: drop_syncs, which is not
    numbered among the passes), and why it sits where it does in the order."""

    name: str
    run: Callable
    doc: str
    reads: tuple = ()
    provides: tuple = ()
    optional: bool = False
    on_request: bool = False
    why: str = ""

    @property
    def summary(self):
        """The docstring's first line without its `Pass `name`:` head and final period."""
        first = self.doc.strip().splitlines()[0]
        return re.sub(r"^(Pass|Step) `\w+`:\s*", "", first).rstrip(".")

    @property
    def description(self):
        """The docstring after its first line."""
        lines = self.doc.strip().splitlines()[1:]
        return textwrap.dedent("\n".join(lines)).strip()


def check_order(passes):
    """Raise ContractError unless every product a pass reads is provided by an earlier
    pass and no product is provided twice (every name a known product). Returns {product:
    the pass that provides it}."""
    providers = {}
    for p in passes:
        for product in p.reads + p.provides:
            if product not in PRODUCTS and product not in IR_PRODUCTS:
                raise ContractError(f"pass '{p.name}' names {product!r}, which is no "
                                    "product (lowering.context.PRODUCTS, "
                                    "lowering.contract.IR_PRODUCTS)")
        for product in p.reads:
            if product not in providers:
                later = [q.name for q in passes if product in q.provides]
                where = f"pass '{later[0]}' provides it after" if later else \
                    "no pass provides it before"
                raise ContractError(f"pass '{p.name}' reads {product} ({meaning(product)}), "
                                    f"but {where} it")
        for product in p.provides:
            if product in providers:
                raise ContractError(f"{product} is provided by two passes: "
                                    f"'{providers[product]}' and '{p.name}'")
            providers[product] = p.name
    return providers


def check_skipped(passes, skipped, stop_after=None):
    """Raise LoweringError when a pass in `skipped` (names of passes that will not run)
    provides a product that a pass which runs (up to `stop_after`) reads."""
    names = [p.name for p in passes]
    end = names.index(stop_after) + 1 if stop_after and stop_after not in skipped else None
    running = [p for p in passes[:end] if p.name not in skipped]
    for p in passes:
        if p.name not in skipped:
            continue
        for product in p.provides:
            readers = [q.name for q in running if product in q.reads]
            if readers:
                raise LoweringError(
                    f"pass '{p.name}' cannot be disabled here: it provides {product} "
                    f"({meaning(product)}), which {' and '.join(readers)} needs")
