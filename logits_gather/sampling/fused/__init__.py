"""The host side of the fused GPU path: whether a sampler takes it (:mod:`.policy`), launch
plans (:mod:`.plans`), the launcher (:mod:`.launcher`), mailboxes (:mod:`.mailbox`), the
launch sequences (:mod:`.fused`, class ``Fused``, the only module that imports the Triton
kernels) and the filter rows and calls that need a cut over the whole row (:mod:`.cuts`)."""
