"""The exact torch-ops path, on any device: reductions, their all-gathers and merges
(:mod:`.ops`) and the filtered sample (:mod:`.filters`)."""
