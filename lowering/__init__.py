"""Lowering: a scheduled fusion becomes kernel IR, one named pass at a time.

lowering.pipeline.lower runs the passes (lowering/passes, one per module, each ending with
its contract record, lowering.contract) over a context they share (lowering.context) and
the kernel IR (lowering.kir, traversed with lowering.kir.visit). docs/passes.md is the
catalogue.
"""
