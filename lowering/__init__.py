"""Lowering: a scheduled fusion becomes kernel IR, one named pass at a time.

Empty until the lowering-core issue lands: the kernel IR, the ordered pass list
(lowering.pipeline) and the passes (loop nests, indexing, predicates, allocation, sync
insertion, hazard verification) arrive there. Nothing here pretends to work before then.
"""
