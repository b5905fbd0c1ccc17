"""The fused path's ``@triton.jit`` code (imported only where Triton is available): device
functions (:mod:`.keys` sort keys, :mod:`.noise` vLLM's noise and temperature, :mod:`.radix`
radix selects and top-p masses), the exchange (:mod:`.exchange`), the writers (:mod:`.writers`)
and waiting kernels (:mod:`.waiters`) of greedy, sampling, min-p and logprobs, top-k
(:mod:`.topk`) and top-p (:mod:`.topp`)."""
