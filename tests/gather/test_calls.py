"""LogitsGather(check_calls=True) on 2 and 3 gloo ranks: every broken call contract
raises the same ValueError on every rank (nobody hangs, aborts in gloo or returns
garbage), and the object stays usable when all ranks agree it is. A call that one
rank skips for good: gather/test_reliability.py (timeouts)."""

from __future__ import annotations

import pytest
import torch

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from tests.support.data import random_bits, same_bits

KW = dict(columns=6, capacity=4, device="cpu", dtype=torch.float32)


class Calls:
    """Exact calls with fresh data, and failing calls whose messages are collected."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world, self.seed, self.messages = rank, world, 0, []

    def exact(self, g: LogitsGather, m: int = 3) -> None:
        self.seed += 1
        full = random_bits(self.seed, (m, 6 * self.world), torch.float32)
        out = g(full[:, self.rank * 6 : (self.rank + 1) * 6].contiguous())
        assert same_bits(out, full), f"call with seed {self.seed}"

    def fails(self, g: LogitsGather, shard, *expected: str) -> BaseException:
        with pytest.raises(ValueError, match="call check") as info:
            g(shard)
        text = str(info.value)
        for line in expected:
            assert line in text, f"{line!r} not in:\n{text}"
        self.messages.append(text)
        return info.value


def _contract(rank: int, world: int) -> list[str]:
    c = Calls(rank, world)
    g = LogitsGather(**KW)
    assert g.check_calls, "LOGITS_GATHER_CHECK_CALLS=1 must turn the check on"
    last = world - 1
    c.exact(g)
    # a different M on the last rank
    m = 2 if rank == last else 3
    c.fails(
        g,
        torch.ones(m, 6),
        "M differs between ranks",
        f"rank {last}: object #0, call 1, M=2, dtype=torch.float32",
        "rank 0: object #0, call 1, M=3, dtype=torch.float32",
    )
    c.exact(g, 4)
    # a different dtype on rank 0 (a rejected input too: the dtype is fixed at construction)
    dtype = torch.float16 if rank == 0 else torch.float32
    c.fails(
        g,
        torch.ones(3, 6, dtype=dtype),
        "dtype differs between ranks",
        "rank 0: object #0, call 3, M=3, dtype=torch.float16; input rejected: TypeError: "
        "shard.dtype must be torch.float32 (as constructed), got torch.float16",
        "rejected input on rank 0",
    )
    c.exact(g, 1)
    # a bad input on one rank only: each kind, each rank in turn
    bad = [
        torch.ones(3, 5),
        [[1.0] * 6],
        torch.ones(6, 3).t(),
        torch.empty(3, 6, device="meta"),
        torch.ones(5, 6),
    ]
    why = [
        "shard.shape[1] must equal columns=6, got 5",
        "shard must be a torch.Tensor, got list",
        "shard must be contiguous",
        "shard.device must be cpu (this object's device), got meta",
        "shard.shape[0] (M) must be in 1..4 (capacity), got 5",
    ]
    for i, (shard, text) in enumerate(zip(bad, why, strict=True)):
        culprit = i % world
        error = c.fails(
            g,
            shard if rank == culprit else torch.ones(3, 6),
            f"rejected input on rank {culprit}",
            text,
        )
        assert (error.__cause__ is not None) == (rank == culprit), "the culprit chains its own"
        c.exact(g, 1 + i % 4)
    # rank 1 skips a call of g and goes on to h: the object and call index differ
    h = LogitsGather(**KW)
    c.exact(h)
    c.exact(g)
    first, second = (g, h) if rank != 1 else (h, g)
    c.fails(
        first,
        torch.ones(3, 6),
        "object differs between ranks",
        "call index differs between ranks",
        "rank 1: object #1, call 1",
    )
    c.fails(second, torch.ones(3, 6), "object differs between ranks")  # the calls realign
    c.exact(g)
    c.exact(h, 2)
    assert (g._calls.calls, h._calls.calls) == (18, 3)
    return c.messages


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_raises_the_same_error(world: int) -> None:
    per_rank = run_ranks(_contract, world, env={"LOGITS_GATHER_CHECK_CALLS": "1"})
    assert all(messages == per_rank[0] for messages in per_rank), per_rank
    assert len(per_rank[0]) == 9


def _own_channel(rank: int, world: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Groups that do not run gloo (NCCL in real use) get a gloo channel of their own:
    over the whole world with ``new_group``, over a subgroup with local synchronisation
    (rank 2 is not a member and takes no part)."""
    import torch.distributed as dist

    import logits_gather.calls as calls

    pair = dist.new_group([0, 1])  # collective over the world, as torch requires
    monkeypatch.setattr(calls, "_runs_gloo", lambda group: False)
    c = Calls(rank, world)
    g = LogitsGather(**KW, check_calls=True)
    assert g._calls._group is not None and g._calls._group is not dist.group.WORLD
    c.exact(g)
    c.fails(g, torch.ones(1 + rank % 2, 6), "M differs between ranks")
    c.exact(g, 2)
    if rank < 2:
        c.world = 2
        p = LogitsGather(**KW, group=pair, check_calls=True)
        assert p._calls._group is not pair and dist.get_world_size(p._calls._group) == 2
        c.exact(p)
        c.fails(p, torch.ones(3, 6 if rank == 0 else 5), "rejected input on rank 1")
        c.exact(p, 4)
        c.world = world
    dist.barrier()
    c.seed = 100  # ranks 0 and 1 drew more seeds above
    c.exact(g, 1)
    return c.messages[:1]


def _own_channel_entry(rank: int, world: int) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        return _own_channel(rank, world, mp)


def test_groups_without_gloo_get_their_own_channel() -> None:
    per_rank = run_ranks(_own_channel_entry, 3)
    assert per_rank[0] == per_rank[1] == per_rank[2]
