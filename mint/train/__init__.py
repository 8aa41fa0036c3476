"""``mint train``: a specialist's episodes in, a candidate LoRA revision out (SFT, DPO, KTO, GRPO)."""
