"""Helpers shared by the test wings: bit comparisons (:mod:`.data`) and the GPU tests'
cases and checks (:mod:`.gpu`). The ones the scripts use too live in ``scripts/support``."""
