"""Generation for contract evaluation: answers end where they end, bf16 is checked against fp32."""
import json

import pytest
import torch

from mint.base import TINY, build_tiny_random, load_base, load_tokenizer
from mint.harness.base import HarnessSettings
from mint.mol import generate as gen
from mint.mol.generate import answer_complete, generate

TREE = '{"type": "Text", "props": {"text": "a } inside a string"}}'
CODE = "```python\ndef f():\n    return 1\n```"


@pytest.mark.parametrize("text, kinds, complete", [
    (TREE, ("json",), True),
    (TREE[:-1], ("json",), False),                                   # one brace still open
    ('{"text": "a } inside a string"', ("json",), False),            # braces in strings do not count
    ('Here it is: {"type": "Text"}', ("json",), False),              # prose first: the answer may follow
    ('[{"a": 1}, {"b": [2]}]', ("json",), True),
    (TREE, ("fence",), False),                                       # JSON is not an answer end for coding
    (CODE, ("fence",), True),
    (CODE[:-3], ("fence",), False),
    ("```python", ("fence",), False),                                # only the opening fence so far
    ('<tool_call>{"name": "a"}</tool_call>', ("tool_call",), False),  # a second call may follow
    ('<tool_call>{"name": "a"}</tool_call>\n<tool_', ("tool_call",), False),
    ('<tool_call>{"name": "a"}</tool_call>\nDone', ("tool_call",), True),
    ('<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b"}', ("tool_call",), False),
    ("", ("json", "fence", "tool_call"), False),
])
def test_answer_complete(text, kinds, complete):
    assert answer_complete(text, kinds) is complete


class Scripted(torch.nn.Module):
    """Wraps the tiny llama so that each row generates a fixed text, chosen by a word in its prompt."""

    def __init__(self, tokenizer, scripts: dict[str, str]):
        super().__init__()
        self.inner = build_tiny_random(tokenizer)
        self.tokenizer = tokenizer
        self.scripts = {tokenizer.encode(" " + word, add_special_tokens=False)[-1]: tokenizer.encode(text,
                        add_special_tokens=False) for word, text in scripts.items()}
        self.rows, self.step = [], 0
        self.inner.forward = self._forward(self.inner.forward)

    def _forward(self, original):
        def forward(input_ids=None, **kwargs):
            out = original(input_ids=input_ids, **kwargs)
            if input_ids.shape[1] > 1:   # prefill: pick each row's script
                self.step = 0
                self.rows = [next(s for marker, s in self.scripts.items() if marker in row.tolist())
                             for row in input_ids]
            logits = torch.full_like(out.logits[:, -1:, :], -1e4)
            for row, script in enumerate(self.rows):
                token = script[self.step] if self.step < len(script) else self.tokenizer.eos_token_id
                logits[row, -1, token] = 1e4
            self.step += 1
            out.logits = logits
            return out
        return forward


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY)


def chat(word):
    return [{"role": "user", "content": f"Please answer about {word} now"}]


def test_generation_stops_at_the_end_of_a_json_tree_and_rows_end_independently(tokenizer):
    model = Scripted(tokenizer, {"tree": TREE + " and then more words that go on and on and on and on",
                                 "prose": "words " * 40}).inner
    settings = HarnessSettings(max_new_tokens=40, batch_size=2)
    stopped = generate(model, tokenizer, [chat("tree"), chat("prose")], settings, answer_end=("json", "fence"))
    assert stopped.outputs[0] == [TREE]
    assert stopped.outputs[1][0].split() == ["words"] * 40         # no answer end: runs to max_new_tokens
    unstopped = generate(model, tokenizer, [chat("tree"), chat("prose")], settings)
    assert unstopped.outputs[0][0].startswith(TREE + " and then") and unstopped.new_tokens > stopped.new_tokens


def test_generation_stops_after_a_closed_code_block(tokenizer):
    model = Scripted(tokenizer, {"code": CODE + "\nThis function returns one, as asked, and more."}).inner
    result = generate(model, tokenizer, [chat("code")], HarnessSettings(max_new_tokens=48, batch_size=1),
                      answer_end=gen.answer_ends("coding", HarnessSettings(stop_at_answer_end=True)))
    assert result.outputs == [[CODE]]


def test_outputs_come_back_in_the_callers_order_when_batched_by_length(tokenizer):
    model = Scripted(tokenizer, {"tree": TREE, "code": CODE}).inner
    long_first = [chat("code"), [{"role": "user", "content": "a much longer prompt " * 8 + "about tree now"}],
                  chat("code")]
    result = generate(model, tokenizer, long_first, HarnessSettings(max_new_tokens=40, batch_size=2))
    assert [o[0] for o in result.outputs] == [CODE, TREE, CODE]


def test_bf16_generation_records_its_parity_with_fp32_and_leaves_the_model_in_fp32():
    loaded = load_base(TINY)
    prompts = [chat(word) for word in ("tree", "code", "cats", "dogs", "rain", "snow")]
    result = generate(loaded.model, loaded.tokenizer, prompts,
                      HarnessSettings(max_new_tokens=6, batch_size=3, precision="bf16"))
    assert result.precision == "bf16" and len(result.outputs) == 6
    parity = result.parity
    assert parity["examples"] == gen.PARITY_PROMPTS and 0 <= parity["identical"] <= parity["examples"]
    assert parity["agreement"] == parity["identical"] / parity["examples"]
    assert len(parity["mismatches"]) == parity["examples"] - parity["identical"]
    assert next(loaded.model.parameters()).dtype == torch.float32
    assert json.dumps(parity)   # plain data, ready for the report


def test_the_bf16_copy_follows_weights_changed_in_place():
    loaded = load_base(TINY)
    settings = HarnessSettings(max_new_tokens=6, batch_size=2, precision="bf16")
    before = generate(loaded.model, loaded.tokenizer, [chat("tree"), chat("code")], settings).outputs
    with torch.no_grad():
        for parameter in loaded.model.parameters():
            parameter.mul_(-3.0)
    after = generate(loaded.model, loaded.tokenizer, [chat("tree"), chat("code")], settings)
    fp32 = generate(loaded.model, loaded.tokenizer, [chat("tree"), chat("code")],
                    HarnessSettings(max_new_tokens=6, batch_size=2))
    assert after.outputs != before and after.parity["examples"] == 2
    assert after.parity["identical"] == sum(a == b for a, b in zip(after.outputs, fp32.outputs))


def test_auto_precision_stays_fp32_on_a_cpu_without_bf16(monkeypatch):
    from mint import hardware

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "read_cpuinfo", lambda path=None: "flags : fpu avx2 fma\n")
    loaded = load_base(TINY)
    result = generate(loaded.model, loaded.tokenizer, [chat("tree")],
                      HarnessSettings(max_new_tokens=4, precision="auto"))
    assert result.precision == "fp32" and "amx_bf16" in result.precision_reason and result.parity is None


def test_auto_precision_falls_back_to_fp32_when_bf16_disagrees(monkeypatch):
    from mint import hardware

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "read_cpuinfo", lambda path=None: "flags : avx512f avx512_bf16 amx_bf16\n")
    monkeypatch.setattr(gen, "PARITY_MIN_AGREEMENT", 1.01)   # no check can pass
    loaded = load_base(TINY)
    result = generate(loaded.model, loaded.tokenizer, [chat("tree"), chat("code")],
                      HarnessSettings(max_new_tokens=4, precision="auto"))
    assert result.precision == "fp32" and "matched fp32" in result.precision_reason
    assert result.parity["examples"] == 2


def test_the_eval_report_records_precision_and_parity(ws, candidate, tmp_path):
    from mint.contract.evaluate import evaluate
    from tests.contract.test_schema import GOOD

    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(3)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    contract = tmp_path / "ui.yaml"
    contract.write_text(GOOD.replace("batch_size: 2}", "batch_size: 2, precision: bf16}"))
    report = evaluate(ws, candidate("genui").ref, contract).report
    core = report["generation"]["core"]
    assert core["precision"] == "bf16" and core["parity"]["examples"] == 3 and core["new_tokens"] > 0


def test_answers_end_early_only_where_the_contract_asks(tmp_path):
    from mint.contract.schema import load_contract
    from tests.contract.test_schema import GOOD

    (tmp_path / "core.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                     "reference": {"type": "Card"}}) + "\n")
    (tmp_path / "c.yaml").write_text(GOOD)
    assert gen.answer_ends("genui", load_contract(tmp_path / "c.yaml").settings) == ()
    (tmp_path / "c.yaml").write_text(GOOD.replace("batch_size: 2}", "batch_size: 2, stop_at_answer_end: true}"))
    assert gen.answer_ends("genui", load_contract(tmp_path / "c.yaml").settings) == ("json", "fence")
    assert gen.answer_ends("chat", load_contract(tmp_path / "c.yaml").settings) == ()


def test_an_unknown_precision_names_its_field(tmp_path):
    from mint.contract.schema import load_contract
    from mint.errors import BadInput
    from tests.contract.test_schema import GOOD

    (tmp_path / "core.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                     "reference": {"type": "Card"}}) + "\n")
    (tmp_path / "c.yaml").write_text(GOOD.replace("batch_size: 2}", "batch_size: 2, precision: fp8}"))
    with pytest.raises(BadInput, match="harness.decoding.precision"):
        load_contract(tmp_path / "c.yaml")
