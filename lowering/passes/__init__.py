"""The lowering passes, one per module; lowering.pipeline runs them in order."""
