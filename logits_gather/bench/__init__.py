"""``python -m logits_gather.bench``: LogitsGather against the all-gathers it replaces.

Runs
----
The command starts its own ranks, one process per GPU (``--tp`` picks how many;
default: every visible GPU, NCCL process group). Under ``torchrun`` (``RANK`` and
``WORLD_SIZE`` set) each process is one rank and nothing is spawned. With one GPU
the ranks are colocated on it (default ``--tp 2``, gloo, since NCCL refuses two
ranks on one GPU; ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``); without a GPU
they are gloo ranks on CPU. Every rank runs with NVLink multicast off
(``TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1``).
A quick smoke: ``python -m logits_gather.bench --tp 2 --rows 1,64 --quick``.

Methods (interleaved: at each M every method runs, in alternating order)
-----------------------------------------------------------------------
* ``stock``: vLLM's ``all_gather(dim=-1)``: ``all_gather_into_tensor`` into
  ``[tp*M, N]``, then ``reshape(tp, M, N).movedim(0, 1).reshape(M, tp*N)`` (a copy).
* ``nccl_symm``: the same, from and into NCCL-window memory, so NCCL may use its
  symmetric kernels. torch's symmetric-memory backend is process-global and
  cannot change after the first symmetric allocation, and ``ours`` allocates
  with the default one, so by default (``--nccl-symm-route mempool``) the windows
  come from a ``torch.cuda.MemPool`` on the NCCL allocator, registered with
  ``register_mem_pool(pool, symm=True)`` (the same ``ncclMemAlloc`` plus
  ``ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)``). ``--nccl-symm-route
  symm_mem`` uses ``set_backend("NCCL")`` plus ``rendezvous`` instead, for every
  symmetric buffer of the run, ours included. Whether NCCL really ran its
  symmetric kernels is read from a profile: their names start ``ncclSymk``.
* ``ce_pull``: ``torch.ops.symm_mem._low_contention_all_gather`` (copy-engine
  pulls between two barriers) from symmetric inputs, then the permute.
* ``ours``: ``LogitsGather`` (``--ours-backend``, default ``auto``).
* ``limit``: the measured ceiling, ``barrier + egress / bandwidth`` with egress per
  rank ``(tp-1)/tp * M * V * bytes``. Bandwidth is the better of a dedicated push
  (every rank at once ``copy_``s a ``--limit-mib`` chunk into each peer's symmetric
  buffer) and ours at its best M (normally the largest), with the barrier latency
  taken off so it is not counted twice: a ceiling taken from ours
  alone would flatter ours, one taken from the probe alone could sit below what
  ours reaches. The barrier is ours at M=1 with 8 columns (a launch, a 16-byte
  push and the exit barrier): the fixed cost our protocol cannot avoid. Both
  probes run once per run, and both are in the JSON.

Unavailable methods are reported with the reason, never silently dropped.

Timing protocol
---------------
1. Correctness gate first: each method, each M, three calls, compared bit for bit
   with ``torch.cat`` of every rank's shard (random bit patterns from a shared
   seed, NaN and inf included). A WRONG method is reported and never timed.
2. Per M and method: ``--warmup`` calls, whose wall time (slowest rank) sizes the
   bursts (about ``--budget-ms`` each, 3 to ``--iters`` calls).
3. Device time: CUDA events around a burst of back-to-back calls. A spin kernel
   (``torch.cuda._sleep``) holds the stream while the host enqueues the burst, and
   one untimed call after it lines the ranks up. Median over ``--bursts`` bursts
   per rank, then the max over ranks (a collective is as slow as its slowest rank).
4. Two passes, the second in reverse method order; the table shows the median of
   all bursts and the spread between the passes' values.
5. Inputs rotate through ``--sets`` independent sets, so no call reads data that
   the previous call left in L2.
6. Host cost per eager call (ours, stock and, at world size 1, an NCCL
   ``all_gather_into_tensor`` on a 1-rank NCCL subgroup and vLLM's stock path):
   the wall time of issuing many calls without synchronising (the device held by
   a spin so a draining queue cannot stall the host), divided by the count.
   Targets: ours <= 5 µs and <= 0.5x the NCCL call; printed as met or missed.
7. CUDA graphs (ours, stock): ``--graph-calls`` calls captured in one graph
   (``capture_error_mode="thread_local"``), replayed back to back between events;
   µs per captured call and the ratio to eager. Graph outputs are checked too.
8. On CPU: ``time.perf_counter`` around bursts after a barrier; host cost and graphs
   are skipped (they need CUDA), and the output says so.

Traps that once produced wrong conclusions
------------------------------------------
* Cache-resident inputs: repeating one input measures L2, not HBM or NVLink.
* One GPU, several processes: "peer" traffic never leaves the GPU and the ranks
  share its SMs (time-sliced without MPS: milliseconds per call). Such timings
  say nothing about NVLink; the output says so in capitals.
* JIT host cost: Triton's ``kernel[grid](...)`` dispatch costs 10-20 µs per call;
  the first call also compiles. Ours launches precompiled kernels, and warm-up
  keeps compilation and NCCL communicator creation out of every measurement.
* No warm-up: first calls pay for lazy module loading, allocator growth, NCCL
  setup and clocks ramping up.
* Events around eager calls measure ``max(host, device)``: stock at small M is
  host-bound, so without the spin its "device time" is really Python's speed.
* Rank 0's time alone: the slowest rank sets a collective's latency.
* vLLM runs ``compute_logits`` eagerly, outside its CUDA graphs, so host cost is
  part of the real latency; graph replay shows the device-only floor.
* At world size 1 vLLM's reshape is a view; the world-size-1 stock probe forces
  the permute copy so that it costs what it costs at tp > 1.
* ``set_backend("NCCL")`` after ours allocated fails ("can not be changed after
  use"); see ``nccl_symm`` above.
* NCCL falls back from its symmetric kernels silently; the profile says which ran.
"""

from .launch import main

__all__ = ["main"]
