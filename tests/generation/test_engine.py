"""The engine on a contract's settings: answers end where they end, rows join and leave, drafts and samples are
HF generate's, bf16 and int8 are compared with fp32."""
import json

import pytest
import torch

from mint.base import TINY, build_tiny_random, load_base, load_tokenizer
from mint.harness import answer_ends
from mint.harness.base import HarnessSettings
from mint.generation import cache as kv
from mint.generation import engine as gen
from mint.generation import lookup as drafts
from mint.generation import precision as precisions
from mint.generation import sampling
from mint.generation.engine import generate
from mint.generation.stops import answer_complete

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
    """Wraps the tiny llama so that each row generates a fixed text, chosen by a word in its prompt. Rows
    come and go (the stream engine drops finished rows and prefills new ones), so a step finds each row's
    script by its position and the token it was fed: (prompt length, script) pairs seen at prefill where
    the script has that token there."""

    def __init__(self, tokenizer, scripts: dict[str, str]):
        super().__init__()
        self.inner = build_tiny_random(tokenizer)
        self.tokenizer = tokenizer
        self.scripts = {tokenizer.encode(" " + word, add_special_tokens=False)[-1]: tokenizer.encode(text,
                        add_special_tokens=False) for word, text in scripts.items()}
        self.seen: set[tuple[int, tuple[int, ...]]] = set()
        self.inner.forward = self._forward(self.inner.forward)

    def _next(self, script, step):
        return script[step] if step < len(script) else self.tokenizer.eos_token_id

    def _forward(self, original):
        def forward(input_ids=None, attention_mask=None, **kwargs):
            out = original(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            logits = torch.full_like(out.logits[:, -1:, :], -1e4)
            for row, ids in enumerate(input_ids):
                if input_ids.shape[1] > 1:   # prefill: pick the row's script by the word in its prompt
                    script = next(s for marker, s in self.scripts.items() if marker in ids.tolist())
                    length = int(attention_mask[row].sum())
                    self.seen.add((length, tuple(script)))
                    token = self._next(script, 0)
                else:   # the row fed token t at position p = prompt length + step - 1
                    position = int(attention_mask[row].sum()) - 1
                    fed = int(ids[-1])
                    found = {self._next(s, position - length + 1) for length, s in self.seen
                             if 0 <= position - length < len(s) and s[position - length] == fed}
                    assert len(found) == 1, f"the scripts cannot tell this row apart: {found}"
                    token = found.pop()
                logits[row, -1, token] = 1e4
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
                                 "prose": "cat " * 40}).inner
    settings = HarnessSettings(max_new_tokens=40, batch_size=2)
    stopped = generate(model, tokenizer, [chat("tree"), chat("prose")], settings, answer_end=("json", "fence"))
    assert stopped.outputs[0] == [TREE]
    assert stopped.outputs[1][0].split() == ["cat"] * 40         # no answer end: runs to max_new_tokens
    unstopped = generate(model, tokenizer, [chat("tree"), chat("prose")], settings)
    assert unstopped.outputs[0][0].startswith(TREE + " and then") and unstopped.new_tokens > stopped.new_tokens


def test_generation_stops_after_a_closed_code_block(tokenizer):
    model = Scripted(tokenizer, {"code": CODE + "\nThis function returns one, as asked, and more."}).inner
    result = generate(model, tokenizer, [chat("code")], HarnessSettings(max_new_tokens=48, batch_size=1),
                      answer_end=answer_ends("coding", HarnessSettings(stop_at_answer_end=True)))
    assert result.outputs == [[CODE]]


def test_outputs_come_back_in_the_callers_order_when_batched_by_length(tokenizer):
    model = Scripted(tokenizer, {"tree": TREE, "code": CODE}).inner
    long_first = [chat("code"), [{"role": "user", "content": "a much longer prompt " * 8 + "about tree now"}],
                  chat("code")]
    result = generate(model, tokenizer, long_first, HarnessSettings(max_new_tokens=40, batch_size=2))
    assert [o[0] for o in result.outputs] == [CODE, TREE, CODE]


def test_each_conversation_is_reported_done_once_with_its_own_token_count(tokenizer):
    model = Scripted(tokenizer, {"tree": TREE + " and more", "code": "a b", "rain": "c d e f"}).inner
    prompts = [chat("rain"), chat("tree"), chat("code")]
    done, counted = [], []
    result = generate(model, tokenizer, prompts, HarnessSettings(max_new_tokens=40, batch_size=2),
                      progress=counted.append, answer_end=("json",), on_done=done.append)
    assert sorted(done) == [0, 1, 2] and counted == [1, 1, 1]
    expected = [len(tokenizer.encode(text, add_special_tokens=False)) for text in ("c d e f", TREE, "a b")]
    assert result.row_tokens == expected and result.new_tokens == sum(expected)


def test_a_contracts_suites_decode_as_one_stream(ws, candidate, tmp_path, monkeypatch):
    """Two suites of 3 at batch 4: one generate call whose batch holds rows of both suites (and the bare base,
    the candidate's baseline, beside it); each suite still gets its own outputs, in order, and its own
    progress."""
    from mint.contract import evaluate as ev
    from tests.contract.test_schema import GOOD

    for suite, words in (("core", "abc"), ("extra", "xyz")):
        rows = [{"messages": [{"role": "user", "content": f"Show a card titled {w}"}],
                 "reference": {"type": "Card", "props": {"title": w}}} for w in words]
        (tmp_path / f"{suite}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    contract = tmp_path / "ui.yaml"
    text = GOOD.replace("batch_size: 2}", "batch_size: 4}")
    text = text.replace("suites:\n", "suites:\n  - {name: extra, data: extra.jsonl}\n", 1)
    contract.write_text(text)
    calls = []
    real = gen.generate_each

    def spy(model, tokenizer, conversations, settings, slots, *args, **kwargs):
        calls.append(([c[-1]["content"] for c in conversations], list(slots)))
        return real(model, tokenizer, conversations, settings, slots, *args, **kwargs)

    monkeypatch.setattr(gen, "generate_each", spy)
    seen = []
    revision = candidate("genui")
    report = ev.evaluate(ws, revision.ref, contract,
                         progress=lambda suite, done, total, share=None: seen.append((suite, done, total, share))
                         ).report.to_dict()
    [(candidate_call, slots)] = calls
    assert sorted(candidate_call) == sorted(f"Show a card titled {w}" for w in "abcxyz") and len(slots) == 2
    mine = {(label.split()[-1], done, total) for label, done, total, _share in seen if label.startswith(revision.ref)}
    assert mine == {(s, n, 3) for s in ("core", "extra") for n in (0, 1, 2, 3)}
    assert set(report["generation"]) == {"core", "extra"}
    assert all(report["generation"][s]["new_tokens"] > 0 for s in ("core", "extra"))


def test_bf16_generation_leaves_the_model_in_fp32():
    loaded = load_base(TINY)
    prompts = [chat(word) for word in ("tree", "code", "cats", "dogs", "rain", "snow")]
    result = generate(loaded.model, loaded.tokenizer, prompts,
                      HarnessSettings(max_new_tokens=6, batch_size=3, precision="bf16"))
    assert result.precision == "bf16" and len(result.outputs) == 6
    assert next(loaded.model.parameters()).dtype == torch.float32


def test_comparing_precisions_times_both_and_records_their_parity():
    loaded = load_base(TINY)
    prompts = [chat(word) for word in ("tree", "code", "cats", "dogs", "rain", "snow")]
    settings = HarnessSettings(max_new_tokens=6, batch_size=3)
    compared = gen.compare_precisions(loaded.model, loaded.tokenizer, prompts, settings)
    bf16 = generate(loaded.model, loaded.tokenizer, prompts[:precisions.PARITY_PROMPTS],
                    HarnessSettings(max_new_tokens=6, batch_size=3, precision="bf16"))
    fp32 = generate(loaded.model, loaded.tokenizer, prompts[:precisions.PARITY_PROMPTS], settings)
    parity = compared["parity"]
    assert parity["examples"] == precisions.PARITY_PROMPTS
    assert parity["identical"] == sum(a == b for a, b in zip(bf16.outputs, fp32.outputs))
    assert len(parity["mismatches"]) == parity["examples"] - parity["identical"]
    assert compared["speed"]["fp32"]["new_tokens"] == fp32.new_tokens and compared["speed"]["bf16"]["seconds"] > 0
    assert compared["speedup"] == round(compared["speed"]["bf16"]["tokens_per_s"] /
                                        compared["speed"]["fp32"]["tokens_per_s"], 3)
    assert json.dumps(compared)   # plain data, ready for a report


def test_the_bf16_copy_follows_weights_changed_in_place():
    loaded = load_base(TINY)
    settings = HarnessSettings(max_new_tokens=6, batch_size=2, precision="bf16")
    before = generate(loaded.model, loaded.tokenizer, [chat("tree"), chat("code")], settings).outputs
    with torch.no_grad():
        for parameter in loaded.model.parameters():
            parameter.mul_(-3.0)
    after = generate(loaded.model, loaded.tokenizer, [chat("tree"), chat("code")], settings)
    assert after.outputs != before


def test_auto_precision_is_not_resolved_per_generation():
    loaded = load_base(TINY)
    with pytest.raises(ValueError, match="resolved per contract"):
        generate(loaded.model, loaded.tokenizer, [chat("tree")], HarnessSettings(max_new_tokens=4, precision="auto"))


@pytest.mark.parametrize("precision", ["bf16", "int8"])   # int8 merges the candidate's adapter into its copy
def test_the_eval_report_records_the_contracts_precision(ws, candidate, tmp_path, precision):
    from mint.contract.evaluate import evaluate
    from tests.contract.test_schema import GOOD

    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(3)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    contract = tmp_path / "ui.yaml"
    contract.write_text(GOOD.replace("batch_size: 2}", f"batch_size: 2, precision: {precision}}}"))
    report = evaluate(ws, candidate("genui").ref, contract).report.to_dict()
    core = report["generation"]["core"]
    assert core["precision"] == precision and core["new_tokens"] > 0
    assert report["precision"]["requested"] == precision and report["precision"]["used"] == precision


def test_an_eval_decodes_with_the_hardware_plans_threads_and_records_them(ws, candidate, tmp_path, monkeypatch):
    from mint import hardware
    from mint.contract.evaluate import evaluate
    from tests.contract.test_schema import GOOD
    from tests.test_hardware import AVX2_CPU, figures

    monkeypatch.setattr(hardware, "_measure_probe", lambda cores: figures(1.0))
    monkeypatch.setattr(hardware, "_measure_threads", lambda cores: {"1": [0.1] * 3, "2": [0.15] * 3})
    found = hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path / "probe")
    monkeypatch.setattr(hardware, "detect", lambda *args, **kwargs: found)
    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(2)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    contract = tmp_path / "ui.yaml"
    contract.write_text(GOOD)
    decoding_threads = []
    real = gen.generate_each
    monkeypatch.setattr(gen, "generate_each", lambda *args, **kwargs: decoding_threads.append(torch.get_num_threads())
                        or real(*args, **kwargs))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        report = evaluate(ws, candidate("genui").ref, contract).report.to_dict()
    finally:
        torch.set_num_threads(before)
    assert decoding_threads and set(decoding_threads) == {1}
    threads = report["generation"]["core"]["threads"]
    assert threads["value"] == 1 and "1: 0.100 ms, 2: 0.150 ms" in threads["reason"]


def test_answers_end_early_only_where_the_contract_asks(tmp_path):
    from mint.contract.schema import load_contract
    from tests.contract.test_schema import GOOD

    (tmp_path / "core.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                     "reference": {"type": "Card"}}) + "\n")
    (tmp_path / "c.yaml").write_text(GOOD)
    assert answer_ends("genui", load_contract(tmp_path / "c.yaml").settings) == ()
    (tmp_path / "c.yaml").write_text(GOOD.replace("batch_size: 2}", "batch_size: 2, stop_at_answer_end: true}"))
    assert answer_ends("genui", load_contract(tmp_path / "c.yaml").settings) == ("json", "fence")
    assert answer_ends("chat", load_contract(tmp_path / "c.yaml").settings) == ()


def test_an_unknown_precision_names_its_field(tmp_path):
    from mint.contract.schema import load_contract
    from mint.errors import BadInput
    from tests.contract.test_schema import GOOD

    (tmp_path / "core.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                     "reference": {"type": "Card"}}) + "\n")
    (tmp_path / "c.yaml").write_text(GOOD.replace("batch_size: 2}", "batch_size: 2, precision: fp8}"))
    with pytest.raises(BadInput, match="harness.decoding.precision"):
        load_contract(tmp_path / "c.yaml")


def hf_generate_alone(loaded, conversation, max_new_tokens, temperature=0.0, seed=0):
    """HF generate on one prompt by itself (no padding, no neighbours): the reference output."""
    ids = gen.prompt_ids(loaded.tokenizer, [conversation])[0]
    options = dict(max_new_tokens=max_new_tokens, pad_token_id=loaded.tokenizer.pad_token_id,
                   do_sample=temperature > 0)
    if temperature > 0:
        options.update(temperature=temperature, top_p=0.9)
        torch.manual_seed(seed)
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                    **options)
    return loaded.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True).strip()


# prompts of different lengths, more than a batch: rows are left-padded, dropped, and their slots refilled
VARIED = [chat("tree"), [{"role": "user", "content": "a much longer prompt about cats " * 3}], chat("code"),
          [{"role": "user", "content": "Show a login form"}], chat("rain")]


def test_the_stream_gives_hf_generates_greedy_outputs_token_for_token():
    loaded = load_base(TINY)
    result = generate(loaded.model, loaded.tokenizer, VARIED, HarnessSettings(max_new_tokens=12, batch_size=2))
    assert [o[0] for o in result.outputs] == [hf_generate_alone(loaded, c, 12) for c in VARIED]


def test_the_kv_buffer_grows_joins_and_drops_rows_without_changing_greedy_outputs(monkeypatch):
    """Room for 3 columns at a time: the buffers are refilled every few steps, when prompts join and when rows
    leave, and every output is still HF generate's alone."""
    monkeypatch.setattr(kv, "KV_ROOM", 3)
    layers = []
    with_room = kv.with_room
    monkeypatch.setattr(kv, "with_room", lambda cache: layers.extend(with_room(cache).layers) or cache)
    loaded = load_base(TINY)
    with torch.no_grad():   # sharpen the attention: at the random init it is near uniform, so keys barely count
        for name, parameter in loaded.model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.mul_(60.0)
    result = generate(loaded.model, loaded.tokenizer, VARIED, HarnessSettings(max_new_tokens=12, batch_size=2))
    assert layers and all(type(layer) is kv.roomy_layer_class() for layer in layers)
    assert [o[0] for o in result.outputs] == [hf_generate_alone(loaded, c, 12) for c in VARIED]


def test_each_sampled_output_is_hf_generates_with_its_own_seed():
    loaded = load_base(TINY)
    settings = HarnessSettings(max_new_tokens=8, batch_size=2, temperature=0.8, top_p=0.9, samples=2)
    result = generate(loaded.model, loaded.tokenizer, VARIED[:3], settings)
    expected = [[hf_generate_alone(loaded, c, 8, 0.8, seed=i * 2 + s) for s in range(2)]
                for i, c in enumerate(VARIED[:3])]
    assert result.outputs == expected and result.outputs[0][0] != result.outputs[0][1]


def test_sampled_outputs_are_the_same_with_torchs_own_draws(monkeypatch):
    """Where the fast draw's check fails (another torch), rows draw with torch's generators: the same outputs."""
    loaded = load_base(TINY)
    settings = HarnessSettings(max_new_tokens=8, batch_size=3, temperature=0.8, top_p=0.9, samples=2)
    fast = generate(loaded.model, loaded.tokenizer, VARIED[:3], settings).outputs
    monkeypatch.setattr(sampling, "replica_exact", lambda: False)
    drawn_by_torch = []
    multinomial = torch.multinomial
    monkeypatch.setattr(torch, "multinomial", lambda *a, **k: drawn_by_torch.append(1) or multinomial(*a, **k))
    assert generate(loaded.model, loaded.tokenizer, VARIED[:3], settings).outputs == fast and drawn_by_torch


def test_the_stream_gives_hf_generates_greedy_outputs_on_smollm2():
    loaded = load_base("smollm2-135m")
    prompts = VARIED[:3]
    result = generate(loaded.model, loaded.tokenizer, prompts, HarnessSettings(max_new_tokens=10, batch_size=2))
    assert [o[0] for o in result.outputs] == [hf_generate_alone(loaded, c, 10) for c in prompts]


def test_a_finished_row_leaves_the_batch_and_a_waiting_prompt_takes_its_slot(tokenizer):
    scripted = Scripted(tokenizer, {"tree": TREE + " then more", "code": "a b", "rain": "c d e f"})
    rows_per_call = []
    forward = scripted.inner.forward

    def counting(input_ids=None, **kwargs):
        rows_per_call.append((input_ids.shape[0], input_ids.shape[1] > 1))
        return forward(input_ids=input_ids, **kwargs)

    scripted.inner.forward = counting
    prompts = [chat("tree"), chat("code"), chat("rain")]
    result = generate(scripted.inner, tokenizer, prompts, HarnessSettings(max_new_tokens=40, batch_size=2),
                      answer_end=("json",))
    assert [o[0] for o in result.outputs] == [TREE, "a b", "c d e f"]
    produced = [len(tokenizer.encode(t, add_special_tokens=False)) for t in (TREE, "a b", "c d e f")]
    produced[1] += 1                                                # and their EOS; the tree ends at its brace
    produced[2] += 1
    # each row costs one prefill row and one step row per later token, nothing after it finished
    assert sum(rows for rows, prefill in rows_per_call if not prefill) == sum(n - 1 for n in produced)
    prefills = [i for i, (_, prefill) in enumerate(rows_per_call) if prefill]
    assert len(prefills) == 2 and rows_per_call[prefills[0]][0] == 2
    # the third prompt took the freed slot while the tree was still being generated beside it
    assert max(rows for rows, _ in rows_per_call[prefills[1] + 1:]) == 2


def test_a_request_joins_a_running_stream_and_is_delivered_when_its_own_row_finishes():
    """A request handed to a running decode by its ``joining`` source is admitted at the next step with room,
    decoded as it is alone, and its result is told as its row finishes, while the long row still runs."""
    loaded = load_base(TINY)
    engine = gen.Engine(loaded.model, loaded.tokenizer)
    long_prompt, short_prompt = gen.prompt_ids(loaded.tokenizer, [chat("rain"), chat("a much longer topic")])

    def alone(prompt, limit):
        return engine.decode([gen.Request(prompt, limit)]).results[0]

    long_alone, short_alone = alone(long_prompt, 24), alone(short_prompt, 4)
    assert long_alone.finish_reason == "length"                  # guards the test: the long row runs its 24
    events: list[tuple] = []

    def long_step(_delta):                                     # told once a token of the long row
        events.append(("long",))
        return True
    long_step.wants_text = False
    long_request = gen.Request(long_prompt, 24, listener=long_step)
    polls = []

    def joining(room):
        polls.append(room)
        return [gen.Request(short_prompt, 4)] if len(polls) == 3 else []

    def done(index, decoded):
        events.append(("done", index, len(decoded.tokens)))

    run = engine.decode([long_request], batch_size=2, joining=joining, on_done=done)
    assert polls[:3] == [1, 1, 1]                                # asked before each step, for the room there is
    assert [d.tokens for d in run.results] == [long_alone.tokens, short_alone.tokens]
    assert [d.text for d in run.results] == [long_alone.text, short_alone.text]
    heard_before_short = events.index(("done", 1, 4))
    assert heard_before_short < events.index(("done", 0, 24))    # told as its row finished, the long one running
    assert sum(e[0] == "long" for e in events[:heard_before_short]) < 24 // 2
    assert run.results[1].admitted < run.results[0].finished and run.results[1].finished < run.results[0].finished


def test_int8_generation_compares_with_fp32_and_leaves_the_model_untouched():
    loaded = load_base(TINY)
    prompts = [chat(word) for word in ("tree", "code", "cats", "dogs", "rain")]
    result = generate(loaded.model, loaded.tokenizer, prompts,
                      HarnessSettings(max_new_tokens=6, batch_size=3, precision="int8"))
    fp32 = generate(loaded.model, loaded.tokenizer, prompts[:precisions.PARITY_PROMPTS],
                    HarnessSettings(max_new_tokens=6, batch_size=3))
    compared = gen.compare_precisions(loaded.model, loaded.tokenizer, prompts,
                                      HarnessSettings(max_new_tokens=6, batch_size=3), precision="int8")
    assert result.precision == "int8" and compared["parity"]["compared"] == "greedy int8 vs fp32"
    assert compared["parity"]["identical"] == sum(a == b for a, b in zip(result.outputs, fp32.outputs))
    assert all(type(m) is not torch.nn.Linear or m.weight.dtype == torch.float32 for m in loaded.model.modules())
    assert any("quantized" in type(m).__module__ for m in precisions.precision_copy(loaded.model, "int8").modules())


def tiny_lora(path, seed=0):
    """A PEFT LoRA of the tiny base on every linear layer whose B is not zero, so it changes the outputs."""
    from tests.conftest import make_lora

    return make_lora(path, TINY, seed=seed, r=4, alpha=8, targets="all-linear")


def peft_generate_alone(adapter, conversation, max_new_tokens):
    """HF generate on one prompt with the PEFT model (the adapter unmerged): the reference a slot must give."""
    from peft import PeftModel

    loaded = load_base(TINY)
    loaded.model = PeftModel.from_pretrained(loaded.model, str(adapter)).eval()
    return hf_generate_alone(loaded, conversation, max_new_tokens)


def test_a_candidate_in_a_lora_slot_gives_the_unmerged_peft_models_greedy_outputs(tmp_path):
    from mint.generation.slots import attach_adapters

    adapter = tiny_lora(tmp_path / "a")
    loaded = load_base(TINY)
    [slot] = attach_adapters(loaded.model, [adapter])
    settings = HarnessSettings(max_new_tokens=8, batch_size=2)
    result = generate(loaded.model, loaded.tokenizer, VARIED, settings, slot=slot)
    bare = generate(loaded.model, loaded.tokenizer, VARIED, settings)
    assert [o[0] for o in result.outputs] == [peft_generate_alone(adapter, c, 8) for c in VARIED]
    assert result.outputs != bare.outputs          # guards the test: the adapter changes the answers


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_slots_decoded_in_one_stream_answer_as_each_slot_alone(tmp_path, temperature):
    """Three slots (the bare base and two adapters) share one stream, mixed in its batches; each slot's outputs
    are the ones it gives decoded alone, greedy and sampled (a sample's seed is its conversation's, whatever
    the slot)."""
    from mint.generation.slots import attach_adapters

    loaded = load_base(TINY)
    slots = attach_adapters(loaded.model, [tiny_lora(tmp_path / "a", 1), tiny_lora(tmp_path / "b", 2)])
    settings = HarnessSettings(max_new_tokens=8, batch_size=4, temperature=temperature, top_p=0.9,
                               samples=2 if temperature else 1)
    batches = []
    forward = loaded.model.forward
    loaded.model.forward = lambda input_ids=None, **kwargs: batches.append(input_ids.shape[0]) or \
        forward(input_ids=input_ids, **kwargs)
    together = gen.generate_each(loaded.model, loaded.tokenizer, VARIED, settings, [0, *slots])
    assert max(batches) == 4 and len(batches) < 3 * len(VARIED) * 8       # one stream, full batches
    alone = [generate(loaded.model, loaded.tokenizer, VARIED, settings, slot=slot) for slot in (0, *slots)]
    assert [g.outputs for g in together] == [g.outputs for g in alone]
    assert len({json.dumps(g.outputs) for g in alone}) == 3                  # each slot answers differently


def test_prompts_of_very_different_lengths_are_prefilled_apart_and_answer_as_alone():
    """One admitted group is prefilled in runs of similar length: no prefill pads a prompt past
    PREFILL_PADDING times its length, and every answer is still the one it gets decoded alone."""
    loaded = load_base(TINY)
    prompts = gen.prompt_ids(loaded.tokenizer, VARIED)
    padded = []
    forward = loaded.model.forward

    def recording(input_ids=None, attention_mask=None, **kwargs):
        if kwargs.get("cache") is None:            # a prefill: its width against each row's own length
            padded.extend(input_ids.shape[1] / int(n) for n in attention_mask.sum(1))
        return forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    loaded.model.forward = recording
    assert max(map(len, prompts)) > gen.PREFILL_PADDING * min(map(len, prompts))   # guards the test: they differ
    run = gen.Engine(loaded.model, loaded.tokenizer).decode([gen.Request(p, 6) for p in prompts])
    assert len(padded) == len(prompts) and max(padded) <= gen.PREFILL_PADDING
    alone = [gen.Engine(loaded.model, loaded.tokenizer).decode([gen.Request(p, 6)]).results[0] for p in prompts]
    assert [d.tokens for d in run.results] == [d.tokens for d in alone]


def test_a_lookup_draft_is_what_followed_the_last_earlier_occurrence_of_the_longest_recent_ngram():
    lookup = drafts.Lookup([5, 1, 2, 3, 4, 1, 2])
    assert lookup.draft(3) == [3, 4, 1]              # (1, 2) was followed by 3; (4, 1, 2) never occurred before
    lookup.extend([7, 1, 2])
    assert lookup.draft(2) == [7, 1]                 # the last occurrence of (1, 2) now: the one before 7
    assert drafts.Lookup([1, 2, 3]).draft(4) == [] and lookup.draft(0) == []


def sharpened_tiny():
    """The tiny base with sharper attention: at the random init attention is near uniform, so a key a step
    should not read would barely change its output; here it does."""
    loaded = load_base(TINY)
    with torch.no_grad():
        for name, parameter in loaded.model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.mul_(60.0)
    return loaded


def counting_forwards(model):
    """The width of each decode step (a forward given the cache; prefills are not counted)."""
    widths = []
    forward = model.forward

    def counting(input_ids=None, **kwargs):
        if kwargs.get("cache") is not None:
            widths.append(input_ids.shape[1])
        return forward(input_ids=input_ids, **kwargs)

    model.forward = counting
    return widths


def test_prompt_lookup_gives_hf_generates_greedy_outputs_in_fewer_steps(monkeypatch):
    """Drafts are taken where the model picks them and masked out where it does not: every output is still
    HF generate's alone and the stream needs fewer steps. Some drafts here are refused, and a refused
    draft's cache columns are then never read (without the mask the outputs differ)."""
    monkeypatch.setattr(kv, "KV_ROOM", 3)   # the buffers also grow, join and drop rows with drafts in them
    loaded = sharpened_tiny()
    expected = [hf_generate_alone(loaded, c, 24) for c in VARIED]
    refused = []
    take = drafts.take_checked

    def spying(row, draft, picks, *args):
        refused.append(picks[:len(draft)] != draft)
        return take(row, draft, picks, *args)

    monkeypatch.setattr(drafts, "take_checked", spying)
    widths = counting_forwards(loaded.model)
    plain = generate(loaded.model, loaded.tokenizer, VARIED, HarnessSettings(max_new_tokens=24, batch_size=4))
    plain_steps, widths[:] = len(widths), []
    drafted = generate(loaded.model, loaded.tokenizer, VARIED,
                       HarnessSettings(max_new_tokens=24, batch_size=4, prompt_lookup=6))
    assert [o[0] for o in plain.outputs] == [o[0] for o in drafted.outputs] == expected
    assert drafted.new_tokens == plain.new_tokens and drafted.row_tokens == plain.row_tokens
    assert len(widths) < plain_steps and max(widths) > 1
    assert any(refused)


def test_drafts_fill_only_the_rows_finished_sequences_left(monkeypatch):
    """A full batch decodes one token a row; once rows finish, the rest draft into their places: rows x
    (1 + draft) never exceeds the batch."""
    loaded = load_base(TINY)
    prompts = [chat(word) for word in ("tree", "code", "cats", "dogs")]
    shapes = []
    forward = loaded.model.forward

    def recording(input_ids=None, **kwargs):
        if kwargs.get("cache") is not None:       # decode steps only
            shapes.append(tuple(input_ids.shape))
        return forward(input_ids=input_ids, **kwargs)

    loaded.model.forward = recording
    settings = HarnessSettings(max_new_tokens=20, batch_size=4, prompt_lookup=8)
    generate(loaded.model, loaded.tokenizer, prompts, settings)
    steps = shapes
    assert all(rows * width <= 4 for rows, width in steps if width > 1)
    assert all(width == 1 for rows, width in steps if rows == 4)


def test_sampled_rows_draft_nothing():
    loaded = load_base(TINY)
    widths = counting_forwards(loaded.model)
    settings = HarnessSettings(max_new_tokens=8, batch_size=4, temperature=0.8, top_p=0.9, prompt_lookup=8)
    result = generate(loaded.model, loaded.tokenizer, VARIED[:2], settings)
    assert set(widths) == {1}
    assert [o[0] for o in result.outputs] == [hf_generate_alone(loaded, c, 8, 0.8, seed=i) for i, c in
                                              enumerate(VARIED[:2])]


@pytest.mark.parametrize("value, message", [(-1, "at least 0"), ("8", "an integer"), (True, "an integer"),
                                            (65, "at most 64")])
def test_a_bad_prompt_lookup_names_its_field(tmp_path, value, message):
    from mint.contract.schema import load_contract
    from mint.errors import BadInput
    from tests.contract.test_schema import GOOD

    (tmp_path / "core.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                     "reference": {"type": "Card"}}) + "\n")
    (tmp_path / "c.yaml").write_text(GOOD.replace("batch_size: 2}", f"batch_size: 2, prompt_lookup: {json.dumps(value)}}}"))
    with pytest.raises(BadInput, match=f"harness.decoding.prompt_lookup.*{message}"):
        load_contract(tmp_path / "c.yaml")


def test_an_evaluation_reports_the_share_of_its_token_budget_spent_from_the_start(ws, candidate, tmp_path):
    """The ETA of a batched decode follows the token budget spent: every suite's clock starts with the stream
    (done 0, share 0), the share only grows, and it is told between answers, not only when rows finish."""
    from mint.contract import evaluate as ev
    from tests.contract.test_schema import GOOD

    contract = tmp_path / "ui.yaml"
    contract.write_text(GOOD.replace("batch_size: 2}", "batch_size: 4}"))
    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {w}"}],
             "reference": {"type": "Card", "props": {"title": w}}} for w in "abc"]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen = []
    ev.evaluate(ws, candidate("genui").ref, contract,
                progress=lambda label, done, total, share=None: seen.append((label, done, total, share)))
    first = {}
    for label, done, total, share in seen:
        first.setdefault(label, (done, share))
    assert first and all(start == (0, 0.0) for start in first.values())
    shares = [share for _label, _done, _total, share in seen]
    assert shares == sorted(shares) and 0 < shares[-1] <= 1
    between = [share for label, done, total, share in seen if 0 < share < 1 and done == 0]
    assert between, "the share is told while no row has finished yet"
