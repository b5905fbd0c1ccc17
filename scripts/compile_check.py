"""Compiles every push-kernel variant for sm_90 without a GPU (Triton must be installed):
a quick check of syntax, PTX and register use before spending device time.

    python scripts/compile_check.py [--ptx DIR]
"""

import argparse
import itertools
import os
import sys

sys.path.insert(0, os.getcwd())
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from logits_gather import kernel as K  # noqa: E402

SIG = {
    "src": "*bf16",
    **{f"d{i}": "*bf16" for i in range(8)},
    "flags": "*i32",
    "peer_flags": "*i64",
    "status": "*i32",
    "m": "i32",
    "timeout_us": "i32",
}
CONST = ("N", "RANK", "WORLD", "MAXC", "BLOCK", "GRAPH", "NUM_THREADS", "TRAP")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ptx", default=None, help="write each variant's PTX here")
    a = p.parse_args()
    for world, graph, trap, (block, warps) in itertools.product(
        (2, 8), (False, True), (False, True), ((4096, 4), (8192, 8))
    ):
        consts = dict(
            N=151552 // world,
            RANK=1,
            WORLD=world,
            MAXC=132,
            BLOCK=block,
            GRAPH=graph,
            NUM_THREADS=warps * 32,
            TRAP=trap,
        )
        sig = dict(SIG, **{c: "constexpr" for c in CONST})
        attrs = {(i,): [["tt.divisibility", 16]] for i in range(12)}  # aligned pointers
        src = ASTSource(fn=K.push_gather_kernel, signature=sig, constexprs=consts, attrs=attrs)
        ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        ptx = ck.asm["ptx"]
        atoms = sum("atom." in line or "red." in line for line in ptx.splitlines())
        name = f"w{world}_g{int(graph)}_t{int(trap)}_b{block}_nw{warps}"
        print(
            f"{name}: shared {ck.metadata.shared} atomics-in-ptx {atoms} "
            f"st.global.v4 {ptx.count('st.global.v4')} ld.global.v4 {ptx.count('ld.global.v4')}"
        )
        if a.ptx:
            os.makedirs(a.ptx, exist_ok=True)
            with open(os.path.join(a.ptx, name + ".ptx"), "w") as f:
                f.write(ptx)


if __name__ == "__main__":
    main()
