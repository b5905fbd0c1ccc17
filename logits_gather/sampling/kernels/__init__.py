"""The fused path's ``@triton.jit`` code (imported only where Triton is available):
keys and noise (:mod:`.keys`), the mailbox exchange (:mod:`.ll`), writers
(:mod:`.writers`, :mod:`.logprob_writer`, :mod:`.overflow`), waiting kernels
(:mod:`.finals`, :mod:`.topk`, :mod:`.nucleus`, :mod:`.spill`, :mod:`.rowk`, with
:mod:`.masses`), one-launch rounds (:mod:`.single`, :mod:`.single_filters`) and the
exact path's elementwise scores (:mod:`.elementwise`)."""
