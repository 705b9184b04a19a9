"""The measurement core: environment, sync, allocator, memory, timing, the verdict rule,
equality, FLOPs and compilation. Imports nothing else from `deepdive`, and neither torch nor
jax when imported."""
