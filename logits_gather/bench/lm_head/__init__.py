"""The LM-head benchmark (``python -m logits_gather.bench --head H``): the LM head plus
the gather, four ways. ``run.py`` is one rank's run (and says what is measured),
``gate.py`` its inputs and correctness gate, ``report.py`` its table, JSON and PNG.
Named ``lm_head`` so that it is not mistaken for the library's ``logits_gather.head``."""
