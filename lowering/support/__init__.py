"""What the passes share beyond the context: facts about the scheduled fusion and the
kernel-IR structures more than one pass builds.

    analysis          the exact map, parallel types, fragment sizes, which copies are
                      TMA and which matmuls wgmma: read off the fusion before lowering
                      builds anything
    warp_specialized  the warp-specialized TMA pipeline the circular_buffer pass builds
"""
