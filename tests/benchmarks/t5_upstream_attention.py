"""The ``t5`` entry's memory estimate with T5's attention as upstream's transformers (4.57)
computes it, to tell the estimate's accounting from the difference of work:

    python tests/benchmarks/t5_upstream_attention.py ROOT ARGV...

prints ``python -m benchkit.memory``'s JSON for the huggingface benchmark run with ARGV,
its T5 given an attention function registered with transformers' ``AttentionInterface``
that does what 4.57's ``T5Attention`` does in its eager path: the score matrix (no
scaling), the position bias (and mask) added in place, the softmax in float32 cast back
to the scores' type, dropout, the product with the values. (The pinned transformers runs
SDPA there instead: the entry's own estimate.)
"""

from __future__ import annotations

import json
import os
import sys


def upstream_t5_attention(module, query, key, value, attention_mask, scaling=None,
                          dropout=0.0, position_bias=None, **kwargs):  # fmt: skip
    import torch

    scores = torch.matmul(query, key.transpose(3, 2))
    bias = position_bias if attention_mask is None else position_bias + attention_mask
    scores += bias
    weights = torch.nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
    weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), None


def main() -> int:
    root, argv = sys.argv[1], sys.argv[2:]
    folder = os.path.join(root, "benchmarks", "huggingface")
    sys.path[:0] = [root, folder]
    os.chdir(folder)
    from transformers import AttentionInterface

    from benchkit import memory

    AttentionInterface.register("upstream_t5", upstream_t5_attention)
    bench = memory.sibling_main(os.path.join(folder, "footprint.py"))
    make = bench.FACTORIES["T5"]

    def eager(tiny: bool):
        model, shape = make(tiny)
        model.set_attn_implementation("upstream_t5")
        return model, shape

    bench.FACTORIES["T5"] = eager
    fp = memory.estimate_entry(folder, argv, 1, 1)
    print(json.dumps({"footprint": fp.as_dict(), "gpu": fp.gpu_line()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
