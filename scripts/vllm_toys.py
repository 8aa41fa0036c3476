"""A base small enough to start vLLM's CPU build in seconds, and adapters whose answers tell them apart: what the
gateway's end-to-end tests (tests/serve/test_vllm_e2e.py) and scripts/reliability_vllm.py serve on a real vLLM.

mint's own tiny base (head size 16) is one vLLM's CPU attention does not run, so ``toy_base`` writes a 2-layer
llama with head size 64 and SmolLM2's tokenizer (a local base directory, as a user's would be). Its adapters:

- ``noise_adapter``: random LoRA weights, large enough to change every greedy token: an answer that rarely ends
  before max_tokens, so a turn stays in flight as long as asked;
- ``signature_adapter``: trained (a few seconds) until its greedy answer to any turn is one given text, so a
  turn's answer says which adapter answered it, whatever else is in vLLM's batch.
"""
from __future__ import annotations

from pathlib import Path

TOY_LAYERS = 2


def toy_base(directory: Path, seed: int = 0) -> Path:
    """A seeded 2-layer llama (hidden 128, two heads of 64) with SmolLM2's tokenizer, saved at ``directory``."""
    from transformers import LlamaConfig

    from mint.base import TINY, load_tokenizer, seeded_llama

    directory = Path(directory)
    if (directory / "config.json").is_file():
        return directory
    tokenizer = load_tokenizer(TINY)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                         num_hidden_layers=TOY_LAYERS, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)   # no pad id: its embedding row (the tied
    # head's row of the end token, which is SmolLM2's pad) would start at zero, and no adapter could end a turn
    model = seeded_llama(config, seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def noise_adapter(base: Path, out: Path, seed: int, rank: int = 8) -> Path:
    """A PEFT LoRA with random (non-zero) A and B on every projection."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.base import load_base

    model = get_peft_model(load_base(str(base)).model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS,
                                                                  init_lora_weights=False))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    model.save_pretrained(out)
    return Path(out)


PROMPTS = ("hi", "Write a Python function that adds two numbers.", "What's the weather in Paris tomorrow?")


def signature_adapter(base: Path, out: Path, answer: str, seed: int, rank: int = 8, steps: int = 80,
                      prompts: tuple[str, ...] = PROMPTS, conversations: tuple[list, ...] = ()) -> Path:
    """A PEFT LoRA trained until its greedy answer to each of ``prompts`` (alone and after a system turn) and
    ``conversations`` (and, in practice, any short turn like them) is ``answer`` followed by the end of the turn."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.base import load_base

    loaded = load_base(str(base))
    tokenizer = loaded.tokenizer
    torch.manual_seed(seed)
    model = get_peft_model(loaded.model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS))
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    chats = [([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
             for prompt in prompts for system in (None, "You are a helpful assistant.")]
    tail = tokenizer(answer, add_special_tokens=False)["input_ids"] + [end]
    rows = [(list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=False)), tail) for messages in [*chats, *conversations]]
    # one padded batch; the LM head (SmolLM2's 49k-word vocabulary) only on the answer's positions
    width = max(len(h) + len(t) for h, t in rows)
    ids = torch.full((len(rows), width), end)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    where, targets = [], []
    for i, (head, tail) in enumerate(rows):
        ids[i, :len(head) + len(tail)] = torch.tensor(head + tail)
        mask[i, :len(head) + len(tail)] = 1
        where += [(i, len(head) - 1 + j) for j in range(len(tail))]
        targets += tail
    rows_at, columns_at = torch.tensor(where).T
    targets = torch.tensor(targets)
    decoder, head_layer = model.get_base_model().model, model.get_base_model().lm_head
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # a model this small runs several times faster on one thread than on a busy two
    try:
        for _ in range(steps):
            optimizer.zero_grad()
            hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state[rows_at, columns_at]
            loss = torch.nn.functional.cross_entropy(head_layer(hidden), targets)
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(out)
    return Path(out)
