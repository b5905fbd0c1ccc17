"""The host side of the fused GPU path: whether a sampler takes it (:mod:`.policy`),
launch plans (:mod:`.geometry`), mailboxes (:mod:`.mailbox`), launching without
Triton's per-call dispatch (:mod:`.launcher`), the launch sequences (:mod:`.rounds`,
:mod:`.filtered`) and the exact fallback around them (:mod:`.fallback`).
:mod:`.rounds` and :mod:`.filtered` import the Triton kernels; the rest imports without
Triton."""
