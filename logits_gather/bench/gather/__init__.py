"""The gather benchmark (``python -m logits_gather.bench``): every method, every M.

``suite.py`` runs one vocabulary size from inputs (``inputs.py``) through the
correctness gate to the timed rows; ``methods.py`` holds the contenders;
``limit.py`` derives the ceiling from its probes (``barrier_probe.py``,
``push_probe.py``); ``side.py`` holds the side measurements and the buffers kept
to the end; ``targets.py`` checks the run against its targets, ``report.py`` and
``figure.py`` write it out; ``spread.py`` checks the spread target across runs.

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
* ``ours_checked`` (opt-in: ``--methods ...,ours_checked``): ``LogitsGather(...,
  check_calls=True)``, which verifies on every call that all ranks agree on the
  call index, M and dtype; timed next to ``ours`` (device and host µs) to state
  what the checks cost. Unavailable, with the reason, where the keyword is missing.
* ``limit``: the measured ceiling (``limit.py``), ``floor + egress / bandwidth`` with
  egress per rank ``(tp-1)/tp * M * V * bytes``.
  - floor: an independent minimal barrier (``barrier_probe.py``, shares no code with
    our kernel): one CTA per rank signals every rank with one vector release atomic,
    then acquire-spins on its own flag; epochs on the device; timed under CUDA-graph
    replay (20 launches per graph), µs per launch, max over ranks.
  - bandwidth: the best of two push probes (``push_probe.py``: ``copy_`` of one chunk
    into each peer's symmetric buffer, and a Triton kernel storing 16-byte vectors
    from all SMs into every peer, all ranks at once, ``--limit-mib`` egress) and ours
    at its best M with the floor taken off (so it is not counted twice).
  - ``% of limit = 100 * limit / ours`` is clipped at 100; the raw value stays in the
    JSON (``pct_of_limit_raw``) and the cell shows ``100%*`` with a footnote. On CPU
    (gloo) and when ranks share GPUs the limit means nothing: n/a.
  The probes run once per run and are in the JSON.

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
9. Targets (``targets.py``), from the same run, each met / MISSED / not measured:
   ours/stock <= 0.60 at M=1 and <= 0.38 at M=64; under graph replay ours/stock <=
   0.55 at M=1; >= 90% of the limit at every M and >= 95% at M >= 64; faster than
   nccl_symm at every M. Across runs, ``python -m logits_gather.bench.gather.spread
   OUTDIR``
   checks tp=8 spread graph replay at M=1 against <= 1.6x the tp=2 figure.

Traps, and how the protocol avoids each
---------------------------------------
* Cache-resident inputs: repeating one input measures L2, not HBM or NVLink.
* One GPU, several processes: "peer" traffic never leaves the GPU and the ranks
  share its SMs (time-sliced without MPS: milliseconds per call). Such timings
  say nothing about NVLink; the output says so in capitals. Spread placements
  (several ranks on each of several GPUs) cross real links but share them: latency
  only, never bandwidth.
* A limit measured on ours flatters ours: a floor taken from ours at M=1 grows
  whenever our barrier gets slower, so the floor is an independent probe; a % above
  100 means the ceiling was measured low, so it is clipped and flagged, never shown.
* Serialised signals: scalar release atomics issued one after another each wait
  out an NVLink round trip (8 peers: ~4x the cost of one); the floor probe signals
  all ranks with one vector atomic.
* Output files named without V or placement overwrite each other, so names carry both.
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
