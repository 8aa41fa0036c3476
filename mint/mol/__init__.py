"""The mixture: the runtime (each specialist's champion in a LoRA slot of the engine's base, routed by mint.routing),
chat, the turn log, the monitor and the vLLM export."""
