"""vLLM 0.33's own V2 sampler kernels as an oracle for :mod:`logits_gather.sampling.reference`.

vLLM's ``gumbel.py`` and ``min_p.py`` (``vllm/v1/worker/gpu/sample/``) are loaded as
standalone modules, with ``vllm.triton_utils`` stood in by plain ``triton`` (vLLM's own
turns Triton off where no GPU driver is found), from either

- the packed wheel files (``LOGITS_GATHER_VLLM_KERNELS``, default
  ``.dev-vllm/vllm-kernels.tgz`` in the repository), unpacked to a temporary folder, or
- an installed ``vllm`` package (found without importing it).

On CPU the kernels run under ``TRITON_INTERPRET=1``, which must be set before Triton
is imported; hence ``python -m tests.sampling.vllm_oracle`` runs the comparison in its own
process and exits 1 on any mismatch (``tests/sampling/test_vllm_oracle.py`` starts it).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
ENV = "LOGITS_GATHER_VLLM_KERNELS"
MEMBERS = ("gumbel", "min_p")
_SUB = "vllm/v1/worker/gpu/sample"


def _installed() -> dict[str, Path] | None:
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.submodule_search_locations:
        base = Path(next(iter(spec.submodule_search_locations))).parent
        files = {name: base / _SUB / f"{name}.py" for name in MEMBERS}
        if all(f.is_file() for f in files.values()):
            return files
    return None


def packed() -> Path | None:
    """The packed .tgz that ``LOGITS_GATHER_VLLM_KERNELS`` (or the default) names, if any."""
    choice = os.environ.get(ENV, "")
    tgz = Path(choice or ROOT / ".dev-vllm" / "vllm-kernels.tgz")
    return tgz if choice != "installed" and tgz.is_file() else None


def sources() -> dict[str, Path] | str:
    """The two kernel files, or why they cannot be found. ``LOGITS_GATHER_VLLM_KERNELS``
    names the packed .tgz, or is ``installed`` for the installed ``vllm`` package only."""
    choice = os.environ.get(ENV, "")
    if choice == "installed":
        return _installed() or f"no installed vllm with {_SUB}/gumbel.py"
    tgz = Path(choice or ROOT / ".dev-vllm" / "vllm-kernels.tgz")
    if tgz.is_file():
        out = Path(tempfile.mkdtemp(prefix="lg-vllm-"))
        with tarfile.open(tgz) as tar:
            for name in MEMBERS:
                tar.extract(f"{_SUB}/{name}.py", out, filter="data")
        return {name: out / _SUB / f"{name}.py" for name in MEMBERS}
    return _installed() or f"neither {tgz} nor an installed vllm with {_SUB}/gumbel.py"


def _interpreter_index_fix() -> None:
    """Triton 3.6's interpreter holds an int argument as a 1-element array and converts
    it with ``int(array)``, which NumPy 2.4 refuses for arrays of one dimension (``range``
    over ``vocab_size`` in vLLM's min-p kernel fails). Convert through ``.item()``."""
    from triton.runtime import interpreter

    if getattr(interpreter, "_lg_index_fix", False):
        return
    original = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched
    interpreter._lg_index_fix = True


def load() -> dict[str, types.ModuleType]:
    """vLLM's ``gumbel`` and ``min_p`` modules (Triton must be importable)."""
    import triton
    import triton.language as tl

    if os.environ.get("TRITON_INTERPRET") == "1":
        _interpreter_index_fix()

    files = sources()
    if isinstance(files, str):
        raise FileNotFoundError(files)
    shim = types.ModuleType("vllm.triton_utils")
    shim.triton, shim.tl, shim.HAS_TRITON = triton, tl, True
    sys.modules.setdefault("vllm.triton_utils", shim)
    mods = {}
    for name, path in files.items():
        spec = importlib.util.spec_from_file_location(f"_vllm_oracle_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods[name] = mod
    return mods


def vllm_sample(mods, logits, temperature, seeds, positions, min_p=None) -> torch.Tensor:
    """vLLM's V2 steps on ``logits`` ``[M, V]``: an fp32 copy, ``apply_temperature``,
    ``apply_min_p`` (when given), ``gumbel_sample`` without temperature."""
    m = logits.shape[0]
    idx = torch.arange(m, dtype=torch.int32)
    x = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    temp = temperature.to(torch.float32).contiguous()
    mods["gumbel"].apply_temperature(x, idx, temp)
    if min_p is not None:
        mods["min_p"].apply_min_p(x, idx, min_p.to(torch.float32).contiguous())
    return mods["gumbel"].gumbel_sample(
        x, idx, temp, seeds, positions, apply_temperature=False, is_drafting=False
    )


def rows(gen: torch.Generator, m: int, v: int, dtype: torch.dtype) -> torch.Tensor:
    """Random logits of several scales, some -inf entries, some rows with equal maxima."""
    scale = torch.tensor([0.5, 3.0, 30.0])[torch.randint(0, 3, (m, 1), generator=gen)]
    x = torch.randn(m, v, generator=gen) * scale
    x[torch.rand(m, v, generator=gen) < 0.05] = float("-inf")
    x[::7, :: max(v // 5, 1)] = x[::7].amax(1, keepdim=True).clamp_min(0) + 1.0
    return x.to(dtype)


def compare(seed: int = 0, m: int = 96, v: int = 2500) -> tuple[int, int, list[str]]:
    """Draws per (dtype, min-p) case; returns (rows compared, mismatches, notes)."""
    from logits_gather.sampling import reference

    mods = load()
    gen = torch.Generator().manual_seed(seed)
    temps = torch.tensor([0.0, 1.0, 0.7, 1.3, 0.05, 2.0])
    total, bad, notes = 0, 0, []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for with_min_p in (False, True):
            x = rows(gen, m, v, dtype)
            t = temps[torch.arange(m) % len(temps)]
            seeds = torch.randint(-(2**63), 2**63 - 1, (m,), generator=gen)
            seeds[:6] = torch.tensor([0, 1, -1, 2**32, -(2**40) + 3, 2**63 - 1])
            pos = torch.randint(0, 2**31, (m,), generator=gen)
            pos[::3] = torch.arange(0, m, 3) % 5
            mp = None
            if with_min_p:
                mp = torch.tensor([0.0, 0.05, 0.3, 0.9])[torch.randint(0, 4, (m,), generator=gen)]
            want = vllm_sample(mods, x, t, seeds, pos, mp)
            got = reference.sample(x, t, seeds, pos, min_p=mp)
            wrong = (got != want).nonzero().flatten().tolist()
            total += m
            bad += len(wrong)
            if wrong:
                notes.append(f"{dtype} min_p={with_min_p}: rows {wrong[:8]} differ")
    return total, bad, notes


def main() -> int:
    assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1"
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    total, bad, notes = compare(seed)
    print(f"vllm oracle: {total} rows, {bad} mismatches")
    for n in notes:
        print(n)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
