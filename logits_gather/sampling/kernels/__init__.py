"""The fused path's ``@triton.jit`` code (imported only where Triton is available): device
functions (:mod:`.keys`), the exchange (:mod:`.ll`), the writers (:mod:`.writers`) and waiting
kernels (:mod:`.finals`) of greedy, sampling, min-p and logprobs, top-k (:mod:`.topk`) and
top-p (:mod:`.nucleus`)."""
