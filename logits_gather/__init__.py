"""logits_gather: all-gather of vocab-parallel LM-head logits over NVLink.

``LogitsGather`` pushes each rank's ``[M, V/tp]`` shard into every rank's
``[M, V]`` buffer with one Triton kernel over torch symmetric memory, and falls
back to torch.distributed (NCCL, gloo) behind the same API. Importing this
package needs neither CUDA nor Triton.
"""

from .checks import PeerTimeoutError
from .gather import LogitsGather

__all__ = ["LogitsGather", "PeerTimeoutError"]
__version__ = "0.1.0"
