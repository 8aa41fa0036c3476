"""The one decoding engine: contract evaluation, experience sampling, `mint chat` and `mint serve` all decode here.

- ``engine``: requests (prompt ids, a LoRA slot, decoding, stops) through one continuous batch;
- ``lora`` and ``slots``: one preallocated LoRA slot per adapter, one slot per row;
- ``stops``: the one EOS rule and the answer-end stops a contract may ask for;
- ``cache``, ``lookup``, ``text``: the KV cache with room to grow, prompt lookup drafts, whole characters for
  listeners;
- ``precision``: the bf16 and int8 copies a contract's precision asks for.
"""
