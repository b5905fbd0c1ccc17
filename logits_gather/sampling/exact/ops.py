"""The torch-ops path's pieces: per-shard reductions (``pack_*``, into a rank's fp32
payload row), their small all-gathers (:class:`Exchange`) and the cross-rank merges
(``combine_*``, the same on every rank, over ``g`` ``[M, W, width]``). Payload columns
(fp32 words; an int64 field takes two):

- greedy: 0 the row max (in the shard's dtype; fp32 for sample's noisy scores), 2-3 its
  local index;
- logprobs: 0 the max, 1 sum exp(x - max), 2 the token's logit, 4.. top-n keys.

``torch.max`` returns the first maximal element (or first NaN) of a shard and ranks merge
in rank order, so ties go to the lowest global id, exactly as over the whole row.

An exchange is a fp32 :class:`~logits_gather.LogitsGather`, which copies bits: int64 or
bf16/fp16 fields travel as views. Building one is collective (every rank, the same
``width`` and ``rows``, never during capture). Each sampler owns its exchanges, one per
width, and keeps a grown one's predecessor alive (a peer may still read it); nothing here
is cached per process, so deleting the sampler frees them and its hold on the group.
"""

from __future__ import annotations

import torch

from ...gather import LogitsGather
from ..checks import capturing

NEG_INF = float("-inf")
GREEDY_WIDTH = BEST_WIDTH = 4  # sample's best noisy score is a greedy of the scores
_LOW32 = (1 << 32) - 1
_CANONICAL_NAN = 0x7FC00000


def slots(count: int, cap: int) -> int:
    """The next power of two >= ``count``, at most ``cap`` (few widths, few builds)."""
    return min(1 << max(count - 1, 0).bit_length(), cap) if count else 0


def logprobs_width(room: int) -> int:
    return 4 + 2 * room


def _i64(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int64)


def _pick(values: torch.Tensor, index: torch.Tensor, columns: int) -> torch.Tensor:
    """``[M, W]`` per-rank winners -> ``[M]`` global ids of the first maximal one."""
    r = values.argmax(1, keepdim=True)
    return torch.add(index.gather(1, r), r, alpha=columns).squeeze(1)


def _store_max(x: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> None:
    # Not out=(values, index): CUDA wants both outputs to share strides, these views do not.
    v, i = torch.max(x, 1)
    values.copy_(v)
    index.copy_(i)


def pack_greedy(x: torch.Tensor, payload: torch.Tensor) -> None:
    _store_max(x, payload.view(x.dtype)[:, 0], _i64(payload)[:, 1])


def combine_greedy(g: torch.Tensor, dtype: torch.dtype, columns: int) -> torch.Tensor:
    """The global argmax ``[M]``."""
    return _pick(g.view(dtype)[..., 0], _i64(g)[..., 1], columns)


def sort_keys(xf: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """int64 keys ordered like (logit descending, global id ascending) as ``torch.sort``
    (every NaN one value above +inf, -0.0 as +0.0); ``low`` is ``2**32 - 1 - global id``."""
    bits = xf.add(0.0).view(torch.int32).to(torch.int64)
    bits.masked_fill_(xf.isnan(), _CANONICAL_NAN)
    bits = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return bits.mul_(1 << 32).add_(low)


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``sort_keys`` back to (fp32 logits, global ids)."""
    hi = keys >> 32
    bits = torch.where(hi < 0, hi ^ 0x7FFFFFFF, hi).to(torch.int32)
    return bits.view(torch.float32), _LOW32 - (keys & _LOW32)


def pack_logprobs(xf, local_ids, n: int, room: int, payload, low) -> None:
    columns = xf.shape[1]
    row_max = payload[:, 0]
    torch.amax(xf, 1, out=row_max)
    # A shard of -inf contributes exp(-inf) = 0, not exp(-inf - -inf) = NaN.
    shift = row_max.masked_fill(row_max == NEG_INF, 0.0)
    torch.sum(torch.sub(xf, shift[:, None]).exp_(), 1, out=payload[:, 1])
    torch.gather(xf, 1, local_ids.clamp(0, columns - 1)[:, None], out=payload[:, 2:3])
    if n:
        keys = _i64(payload)[:, 2 : 2 + room]
        nn = min(n, columns)
        keys[:, nn:].fill_(torch.iinfo(torch.int64).min)
        keys[:, :nn].copy_(sort_keys(xf, low).topk(nn, 1, sorted=False).values)


def combine_logprobs(g: torch.Tensor, token_ids: torch.Tensor, n: int, room: int, columns: int):
    """(token logprobs ``[M]``, top ids ``[M, n]``, top logprobs ``[M, n]``)."""
    m, w, _ = g.shape
    row_max, sums, logit = g[..., 0], g[..., 1], g[..., 2]
    big = row_max.amax(1, keepdim=True)
    log_sum = sums.mul(torch.sub(row_max, big).exp_()).sum(1, keepdim=True).log_()
    owner = torch.div(token_ids, columns, rounding_mode="floor")[:, None]
    token_lp = logit.gather(1, owner).sub_(big).sub_(log_sum).squeeze(1)
    if not n:
        empty = torch.empty(m, 0, device=g.device)
        return token_lp, empty.long(), empty
    keys = _i64(g)[..., 2 : 2 + room].reshape(m, w * room).topk(n, 1).values
    values, ids = decode_keys(keys)
    return token_lp, ids, values.sub(big).sub_(log_sum)


class Exchange:
    """A fp32 ``LogitsGather`` of ``[capacity, width]`` and the ``payload`` it sends."""

    def __init__(self, width: int, capacity: int, group, device: torch.device, backend: str):
        self.gather = LogitsGather(width, capacity, device, group, torch.float32, backend)
        self.width, self.capacity = width, capacity
        self.world_size = self.gather.world_size
        self.payload = torch.empty(capacity, width, dtype=torch.float32, device=device)

    def send(self, rows: int) -> torch.Tensor:
        """Every rank's ``payload[:rows]`` as ``[rows, W, width]``: a view of the gather's
        buffer, valid until the next-but-one call (stream order is enough)."""
        return self.gather(self.payload[:rows]).view(rows, self.world_size, self.width)


def build(
    width: int,
    rows: int,
    group,
    device: torch.device,
    backend: str,
    capacity: int,
    old: Exchange | None,
) -> Exchange:
    """A new exchange of ``width`` with room for ``max(capacity, rows)`` rows (collective),
    replacing ``old`` (or None); raises under CUDA graph capture, where it cannot be built."""
    if capturing(device):
        have = "none" if old is None else f"capacity {old.capacity}"
        raise RuntimeError(
            f"logits_gather.sampling: no exchange of width {width} for {rows} rows ({have}); "
            "it is built collectively on first use, which cannot happen inside CUDA graph "
            "capture: run the same operation (same top_k/top_n, M >= this M) once before capture"
        )
    return Exchange(width, max(capacity, rows), group, device, backend)
