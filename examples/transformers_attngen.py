"""Run a Hugging Face Transformers model with attngen's attention and compare its greedy generation with eager.

    python examples/transformers_attngen.py            # a small random Mistral-style model (no download)
    python examples/transformers_attngen.py --model gemma2

Needs `transformers` (>= 5.0) and a CUDA device. The model is built from a config with random weights, so
nothing is downloaded; a real checkpoint works the same way:
`AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, attn_implementation="attngen")`.
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch

CONFIGS = {
    "mistral": ("MistralConfig", {"sliding_window": 64}),
    "llama": ("LlamaConfig", {}),
    "gemma2": ("Gemma2Config", {"sliding_window": 64, "query_pre_attn_scalar": 128, "attn_logit_softcapping": 50.0}),
}


def build(transformers: object, name: str) -> torch.nn.Module:
    """A small random model (4 layers, head dim 128, GQA 8:2) in bf16 on the GPU, with eager attention."""
    cls_name, extra = CONFIGS[name]
    config = getattr(transformers, cls_name)(vocab_size=1000, hidden_size=1024, intermediate_size=2048,
                                             num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                                             head_dim=128, max_position_embeddings=1024, initializer_range=0.1,
                                             pad_token_id=0, **extra)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",  # type: ignore[attr-defined]
                                                          dtype=torch.bfloat16)
    return model.cuda().eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="mistral")
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    try:
        import transformers
    except ImportError:
        print("this example needs transformers: pip install 'transformers>=5'")
        return 1
    if not torch.cuda.is_available():
        print("no CUDA device: attngen's kernels run on a GPU (sm80 or newer)")
        return 1

    from attngen.integrations.transformers import register

    register()  # attn_implementation="attngen" now names attngen's kernels
    eager = build(transformers, args.model)
    ours = copy.deepcopy(eager)
    ours.set_attn_implementation("attngen")  # type: ignore[operator]

    prompt = torch.randint(3, 1000, (2, 100), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    mask = torch.ones_like(prompt)
    mask[1, :30] = 0  # the second prompt is left-padded: attngen runs it as packed sequences
    kw = {"attention_mask": mask, "max_new_tokens": args.new_tokens, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        want = eager.generate(prompt, **kw)[:, prompt.shape[1]:]  # type: ignore[operator]
        got = ours.generate(prompt, **kw)[:, prompt.shape[1]:]  # type: ignore[operator]
    for row in range(prompt.shape[0]):
        same = torch.equal(got[row], want[row])
        print(f"row {row}: attngen {got[row, :12].tolist()}...")
        print(f"       eager   {want[row, :12].tolist()}... {'same tokens' if same else 'tokens differ'}")
    match = torch.equal(got, want)
    print(f"{args.model}: {args.new_tokens} greedy tokens {'match' if match else 'differ from'} eager attention "
          f"(both bf16; a difference can be a tie at bf16 precision)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
