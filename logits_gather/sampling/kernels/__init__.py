"""The fused path's ``@triton.jit`` code (imported only where Triton is available):
keys, noise and temperature (:mod:`.keys`), the mailbox exchange (:mod:`.ll`), writers
(:mod:`.writers`, :mod:`.logprob_writer`, :mod:`.overflow`), waiting kernels
(:mod:`.finals`, :mod:`.topk`, :mod:`.nucleus`, :mod:`.spill`, :mod:`.rowk`, with
:mod:`.masses`) and the one-launch rounds (:mod:`.single`)."""
