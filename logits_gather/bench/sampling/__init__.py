"""``python -m logits_gather.bench.sampling``: our vocab-parallel sampler against vLLM's own.

Per logits profile (``profiles.py``: ``peaked`` LLM-like rows of 0.5 to 3 nats,
``t08``, ``flat`` at T in [1, 1.5], ``mixed`` T in [0, 1.5]; ``--profiles``), per op
(greedy; temperature sample; min_p=0.05; top_k=50; top_p=0.9; top_k=50 with
top_p=0.9) and per M, interleaved in one run:

- ``ours``: our sampler on the ``[M, V/tp]`` shard;
- ``vllm``: the stock gather (NCCL all-gather + permute at tp > 1, nothing at tp = 1),
  then what vLLM's V2 sampler runs: the fp32 copy, ``apply_temperature``,
  ``apply_min_p``, ``apply_top_k_top_p_triton``, ``gumbel_sample``. Only when
  ``vllm`` imports (and on CPU only under ``TRITON_INTERPRET=1``); otherwise the run
  says why and goes on without it;
- ``torch``: the stock gather, then the torch ops vLLM runs without Triton.

Before timing, greedy tokens must be equal across methods, and no method may modify
its input; the other ops' token agreement with vLLM is printed (not asserted: the
definitions may differ). Timing follows the gather benchmark: CUDA events over bursts
after a spin (``perf_counter`` on CPU), two passes, median per rank then max over
ranks, and CUDA-graph replay where a call captures. Ratios are ours / peer: lower is
better; ``ours/read`` is ours over the read limit (the shard read once at the copy
bandwidth measured at the start, ``readlimit.py``); noisy cells are flagged
(``tables.py``). The targets compare against vLLM's kernels, per profile. Files:
``sampling_tp{tp}_{placement}_bf16_V{V}.txt|.json|.png`` in ``--out``.

``options.py`` holds the command line and starts the ranks (``bench/ranks.py``);
``run.py`` is one rank, ``measure.py`` its measurements per profile and M,
``peers.py`` the methods; ``report.py`` writes the text and JSON from ``tables.py``
and ``targets.py``, and ``figure.py`` the PNG.
"""
