"""The pass contract (lowering.contract, lowering.context): each pass's record names what
it reads and provides, the pipeline's order is checked against the records, a disable that
breaks a later pass's dependency is refused, a product read before its pass has run is an
error naming both; the instrument lower() calls after every pass; the pass documentation
written from the records (tools/gen_pass_docs.py) is the one checked in."""

import dataclasses
import pathlib
import sys
from types import MappingProxyType

import pytest

import fuserir
from driver import stages
from lowering import pipeline
from lowering.context import PRODUCTS, LoweringContext, ProductError
from lowering.contract import ContractError, Pass, check_order, check_skipped
from lowering.errors import LoweringError
from lowering.pipeline import PASS_NAMES, PIPELINE, PROVIDERS, lower

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import gen_pass_docs  # noqa: E402

from test_passes import ROWSUM, TINY  # noqa: E402

EXAMPLES = ROOT / "examples"


def record(name):
    return next(p for p in PIPELINE if p.name == name)


# -- the order ---------------------------------------------------------------------------

def test_every_product_is_provided_once_before_every_pass_that_reads_it():
    assert check_order(PIPELINE) == PROVIDERS
    for p in PIPELINE:
        for product in p.reads:
            provider = record(PROVIDERS[product])
            assert PIPELINE.index(provider) < PIPELINE.index(p), (p.name, product)
    assert PROVIDERS["buffers"] == "allocation" and PROVIDERS["sync_ids"] == "insert_syncs"


def test_an_order_that_reads_a_product_before_its_pass_is_refused():
    order = list(PIPELINE)
    i, j = order.index(record("allocation")), order.index(record("indexing"))
    order[i], order[j] = order[j], order[i]
    with pytest.raises(ContractError, match=r"pass 'indexing' reads buffers \(\{tensor: "
                                            r"kir.Buffer\}.*\), but pass 'allocation' "
                                            r"provides it after it"):
        check_order(order)


def test_a_product_two_passes_provide_or_no_pass_knows_is_refused():
    twice = Pass("twice", lambda ctx, kernel: kernel, "Pass `twice`: x.",
                 provides=("buffers",))
    with pytest.raises(ContractError, match="buffers is provided by two passes: "
                                            "'allocation' and 'twice'"):
        check_order(PIPELINE + (twice,))
    unknown = Pass("odd", lambda ctx, kernel: kernel, "Pass `odd`: x.", reads=("bufers",))
    with pytest.raises(ContractError, match="pass 'odd' names 'bufers', which is no product"):
        check_order((unknown,))


def test_a_disable_that_breaks_a_later_pass_is_refused_naming_pass_product_and_reader():
    with pytest.raises(LoweringError, match=r"pass 'insert_syncs' cannot be disabled here: "
                                            r"it provides sync_ids \(the ids of the inserted "
                                            r"barriers .*\), which drop_syncs needs"):
        lower(fuserir.parse(TINY), disable_passes=("insert_syncs",), drop_syncs=("sync1",),
              verify=False)
    # without drop_syncs nothing needs the barrier ids
    kernel, _ = lower(fuserir.parse(TINY), disable_passes=("insert_syncs",), verify=False)
    assert kernel is not None


def test_check_skipped_looks_at_the_passes_that_run():
    maker = Pass("maker", None, "Pass `maker`: x.", provides=("kernel",), optional=True)
    middle = Pass("middle", None, "Pass `middle`: x.")
    user = Pass("user", None, "Pass `user`: x.", reads=("kernel",))
    passes = (maker, middle, user)
    check_skipped(passes, set())
    check_skipped(passes, {"maker", "user"})
    check_skipped(passes, {"maker"}, stop_after="middle")        # user does not run
    with pytest.raises(LoweringError, match="pass 'maker' cannot be disabled here: it "
                                            "provides kernel .*, which user needs"):
        check_skipped(passes, {"maker"})


@pytest.mark.parametrize("kwargs, message", [
    ({"disable_passes": ("indexing",)},
     "pass 'indexing' cannot be disabled (only insert_syncs, verify_hazards can)"),
    ({"disable_passes": ("unroll_register_loops",)},
     "pass 'unroll_register_loops' cannot be disabled"),
    ({"stop_after": "drop_syncs"}, "unknown pass 'drop_syncs'; the passes are: "
                                   + ", ".join(PASS_NAMES)),
])
def test_only_the_optional_passes_can_be_disabled(kwargs, message):
    with pytest.raises(LoweringError) as refused:
        lower(fuserir.parse(TINY), **kwargs)
    assert message in str(refused.value)


# -- the context ---------------------------------------------------------------------------

def test_reading_a_product_before_its_pass_has_run_names_both():
    ctx = LoweringContext(fuserir.parse(TINY), providers=PROVIDERS)
    with pytest.raises(ProductError, match=r"^lowering reads ctx.buffers before pass "
                                           r"'allocation', which provides it, has run$"):
        ctx.buffers
    early = Pass("early", lambda ctx, kernel: ctx.store_info, "Pass `early`: x.")
    with pytest.raises(ProductError, match=r"^pass 'early' reads ctx.store_info before pass "
                                           r"'indexing', which provides it, has run$"):
        ctx.run_pass(early, None)


def test_products_are_written_by_their_pass_only_and_frozen_once_it_has_run():
    ctx = LoweringContext(fuserir.parse(TINY), providers=PROVIDERS)
    kernel = None
    for p in PIPELINE[:PIPELINE.index(record("allocation")) + 1]:
        kernel = ctx.run_pass(p, kernel)
    assert isinstance(ctx.buffers, MappingProxyType) and isinstance(ctx.live, frozenset)
    assert all(isinstance(v, tuple) for v in ctx.bound.values())
    with pytest.raises(TypeError):
        ctx.buffers[None] = None
    thief = Pass("thief", lambda ctx, kernel: setattr(ctx, "store_info", {}), "Pass `x`: x.")
    with pytest.raises(ProductError, match="pass 'thief' writes ctx.store_info, which pass "
                                           "'indexing' provides"):
        ctx.run_pass(thief, kernel)
    with pytest.raises(ProductError, match="provides ctx.buffers a second time"):
        ctx.buffers = {}
    with pytest.raises(ProductError, match="rebinds ctx.index_dtype, a fact"):
        ctx.index_dtype = None
    lazy = dataclasses.replace(record("indexing"), run=lambda ctx, kernel: kernel)
    with pytest.raises(ProductError, match="pass 'indexing' did not provide ctx.store_info"):
        ctx.run_pass(lazy, kernel)


def _fusions():
    yield fuserir.parse(TINY), {}
    yield fuserir.parse(ROWSUM), {}
    for name in ("seed_matmul.fz", "splitk_tiled.fz", "splitk_matmul.fz"):
        yield fuserir.dsl.parse_file(EXAMPLES / name), {}
    yield fuserir.dsl.parse_file(EXAMPLES / "splitk_tiled.fz"), {"drop_syncs": ("sync1",),
                                                                  "verify": False}
    yield fuserir.dsl.parse_file(EXAMPLES / "seed_matmul.fz"), {"vector_caps": {"A": 4}}


def test_every_product_a_pass_reads_is_in_its_record(monkeypatch):
    seen = set()

    class Recording(LoweringContext):
        def __getattribute__(self, name):
            if name in PRODUCTS:
                running = object.__getattribute__(self, "__dict__").get("_running")
                seen.add((running, name))
            return super().__getattribute__(name)

    monkeypatch.setattr(pipeline, "LoweringContext", Recording)
    for fusion, options in _fusions():
        lower(fusion, **options)
    assert {running for running, _ in seen} >= {"validate", "indexing", "predicates",
                                                 "block_reductions", "circular_buffer"}
    undeclared = sorted((running, name) for running, name in seen
                        if name not in record(running).reads + record(running).provides)
    assert undeclared == []


# -- the instrument ------------------------------------------------------------------------

def test_the_instrument_is_called_once_per_pass_that_ran_in_order():
    calls = []
    fusion = fuserir.parse(TINY)
    kernel, _ = lower(fusion, instrument=lambda *args: calls.append(args))
    assert [name for name, _, _ in calls] == list(PASS_NAMES)
    assert [k is None for _, k, _ in calls] == [True] * 3 + [False] * (len(PASS_NAMES) - 3)
    assert calls[-1][1] is kernel and calls[0][2] is not fusion    # lowering's own copy
    calls.clear()
    lower(fusion, disable_passes=("insert_syncs",), verify=False, stop_after="predicates",
          instrument=lambda *args: calls.append(args))
    assert [name for name, _, _ in calls] == list(PASS_NAMES[:PASS_NAMES.index("predicates")
                                                              + 1])


def test_the_dump_after_instrument_prints_the_passes_the_environment_names(monkeypatch,
                                                                           capsys):
    monkeypatch.delenv(stages.ENV_DUMP_AFTER, raising=False)
    assert stages.env_instrument(PASS_NAMES) is None
    monkeypatch.setenv(stages.ENV_DUMP_AFTER, "inline_defaults,unroll_register_loops")
    lower(fuserir.parse(TINY), instrument=stages.env_instrument(PASS_NAMES))
    lower(fuserir.parse(TINY))                       # no instrument: a trial prints nothing
    headers = [line for line in capsys.readouterr().err.splitlines() if "=====" in line]
    assert headers == ["===== fuserir dump: after pass inline_defaults (tiny) =====",
                       "===== fuserir dump: after pass unroll_register_loops (tiny) ====="]


# -- unroll_register_loops, a pass of its own ------------------------------------------------

def test_unroll_register_loops_changes_only_loop_kinds_after_indexing():
    fusion = fuserir.dsl.parse_file(EXAMPLES / "seed_matmul.fz")
    _, dumps = lower(fusion, dump_after=["indexing", "unroll_register_loops"],
                     stop_after="unroll_register_loops")
    before, after = dumps["indexing"], dumps["unroll_register_loops"]
    assert after.count("unroll for") > before.count("unroll for")
    assert after.replace("unroll for", "for") == before.replace("unroll for", "for")


# -- the documentation written from the records -----------------------------------------------

@pytest.mark.parametrize("path", ["docs/passes.md", "docs/cli.md", "lowering/pipeline.py"])
def test_the_generated_pass_docs_are_current(path):
    """Fails when a pass's docstring or record changed without `python3
    tools/gen_pass_docs.py` (or the file's generated region was edited by hand)."""
    assert (ROOT / path).read_text() == gen_pass_docs.generated()[path]


def test_the_pipeline_header_lists_the_records():
    lines = pipeline.__doc__.split("then runs:\n\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[1] for line in lines] == [p.name for p in PIPELINE]
    assert all(line.endswith(p.summary) for line, p in zip(lines, PIPELINE))
