"""The exact torch-ops path, on any device: per-shard reductions (:mod:`.ops`), small
all-gathers of their payloads (:mod:`.exchange`), and the filtered sample with its
weighted radix selects (:mod:`.filters`). It serves every call the fused kernels do not,
and is their exact fallback."""
