import json
import uuid

import pytest

from mint.registry import store
from mint.registry.artifacts import register


@pytest.fixture(scope="session")
def adapter_dir(tmp_path_factory):
    """A real LoRA adapter of the tiny base, saved by PEFT as safetensors."""
    from peft import LoraConfig, get_peft_model

    from mint.base import TINY, load_base

    loaded = load_base(TINY)
    model = get_peft_model(loaded.model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                    init_lora_weights=False))
    path = tmp_path_factory.mktemp("adapter") / "lora"
    model.save_pretrained(path)
    return path


@pytest.fixture
def candidate(ws, adapter_dir):
    """register(specialist) -> a new candidate revision of the tiny LoRA."""
    def make(specialist="coding", **meta):
        return register(ws, adapter_dir, specialist=specialist, base="tiny-random", method="sft", **meta)
    return make


@pytest.fixture
def report_for(ws, tmp_path):
    """report_for(revision, baseline_id, verdict=...) -> path of an eval report in DESIGN.md's shape."""
    def make(revision, baseline=None, verdict="pass", version=3, contract_path=None):
        path = tmp_path / f"report-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps({
            "revision": revision.ref, "revision_id": revision.id,
            "contract": {"name": "coding", "version": version, "sha256": "ab" * 32,
                         **({"path": str(contract_path)} if contract_path else {})},
            "baseline": {"revision_id": baseline, "metrics": {}},
            "metrics": {"core.pass_at_1": 0.4}, "gates": [], "verdict": verdict,
            "created_at": store.now()}))
        return path
    return make
