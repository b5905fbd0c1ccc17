"""The exact torch-ops path, on any device: reductions (:mod:`.ops`), their all-gathers
(:mod:`.exchange`) and the filtered sample (:mod:`.filters`)."""
