"""Index arithmetic: what lowering knows about the integer expressions it builds.

    intervals        how each integer operator acts on intervals (both analyses below)
    arith            value ranges and the simplifications they allow (Ranges, simplify)
    index_bounds     how far a kernel's indices reach at a run's sizes: 32 or 64 bits
    buffers          where an element lives: the index into its buffer (allocation layout,
                     swizzle, padding) or global array
    fragments        per-lane indices of tensor-core tiles (the descriptors' fragment maps)
    hopper_operands  a TMA copy's box and a wgmma operand's matrix layout, read off a
                     scheduled shared tile's indices
    tma_copies       a TMA copy's statements: a load's box, a store's boxes and their
                     commit, the tensor maps
    separation       which block indices an index keeps apart, for every grid size
"""
