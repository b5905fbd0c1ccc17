"""The exact torch-ops path, on any device: per-shard reductions (:mod:`.ops`), small
all-gathers of their payloads (:mod:`.exchange`), weighted radix selects
(:mod:`.select`), and the filtered sample built from them (:mod:`.filters`). It serves
every call the fused kernels do not, and is their exact fallback."""
