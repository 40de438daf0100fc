"""Code generation: kernel IR becomes CUDA C++ compiled by NVRTC, or runs in the CPU
interpreter with its race detector.

Empty until the lowering-core issue lands (codegen.compile, RaceError, HazardError arrive
there). Nothing here pretends to work before then.
"""
