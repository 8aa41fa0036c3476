"""The mixture runtime: a mixed batch answers each row as that row's adapter would alone."""
from __future__ import annotations

import json

import pytest

from mint.base import TINY
from mint.errors import BadInput, Refused
from tests.conftest import CONVERSATIONS, peft_alone

MAX_NEW = 12


def test_mixed_batch_is_token_identical_to_each_row_alone_with_peft(tiny_runtime, tiny_loras):
    for name in ("chat", "agent", "coding", "genui"):
        tiny_runtime.load_adapter(name, tiny_loras[name])
    rows = ["coding", "agent", None, "genui", "chat"]
    from mint.mol.runtime import Decoding

    mixed = tiny_runtime.generate(CONVERSATIONS, rows, Decoding(max_new_tokens=MAX_NEW))
    for conversation, specialist, got in zip(CONVERSATIONS, rows, mixed):
        expected = peft_alone(TINY, tiny_loras[specialist] if specialist else None, conversation, MAX_NEW)
        assert got.token_ids == expected, specialist


def test_adapters_change_the_answer(tiny_runtime, tiny_loras):
    """Guards the identity test: with these weights every adapter differs from the base."""
    from mint.mol.runtime import Decoding

    conversation = CONVERSATIONS[0]
    bare = tiny_runtime.generate([conversation], [None], Decoding(max_new_tokens=MAX_NEW))[0].token_ids
    for name in ("chat", "agent", "coding", "genui"):
        tiny_runtime.load_adapter(name, tiny_loras[name])
    answers = tiny_runtime.generate([conversation] * 4, ["chat", "agent", "coding", "genui"],
                                    Decoding(max_new_tokens=MAX_NEW))
    assert all(a.token_ids != bare for a in answers)
    assert len({tuple(a.token_ids) for a in answers}) == 4


def test_a_uniform_batch_equals_the_same_rows_in_a_mixed_batch(tiny_runtime, tiny_loras):
    from mint.mol.runtime import Decoding

    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    tiny_runtime.load_adapter("chat", tiny_loras["chat"])
    uniform = tiny_runtime.generate(CONVERSATIONS[:2], ["coding", "coding"], Decoding(max_new_tokens=MAX_NEW))
    mixed = tiny_runtime.generate(CONVERSATIONS[:3], ["coding", "coding", "chat"], Decoding(max_new_tokens=MAX_NEW))
    assert [g.token_ids for g in uniform] == [g.token_ids for g in mixed[:2]]


def test_adapter_swap_equals_a_fresh_load_of_the_new_adapter(tiny_runtime, tiny_loras):
    from mint.base import load_base
    from mint.mol.runtime import Decoding, MixtureRuntime

    tiny_runtime.load_adapter("coding", tiny_loras["genui"])       # rank 16, rslora: every slot entry used
    tiny_runtime.load_adapter("coding", tiny_loras["chat"])        # rank 2, other modules: old rows must go
    swapped = tiny_runtime.generate(CONVERSATIONS, ["coding"] * 5, Decoding(max_new_tokens=MAX_NEW))
    fresh = MixtureRuntime(load_base(TINY), ["chat", "agent", "coding", "genui"], max_rank=16)
    fresh.load_adapter("coding", tiny_loras["chat"])
    expected = fresh.generate(CONVERSATIONS, ["coding"] * 5, Decoding(max_new_tokens=MAX_NEW))
    assert [g.token_ids for g in swapped] == [g.token_ids for g in expected]
    assert tiny_runtime.slots["coding"].rank == 2


def test_a_smaller_adapter_swapped_in_leaves_nothing_of_the_larger_one_in_a_mixed_batch(tiny_runtime, tiny_loras):
    """A mixed batch reads every slot up to its largest rank, so a slot's columns past its own rank must be zero."""
    from mint.base import load_base
    from mint.mol.runtime import Decoding, MixtureRuntime

    tiny_runtime.load_adapter("genui", tiny_loras["genui"])        # rank 16: the batch reads 16 columns
    tiny_runtime.load_adapter("coding", tiny_loras["genui"])
    tiny_runtime.load_adapter("coding", tiny_loras["chat"])        # rank 2 in a slot that held rank 16
    rows = ["coding", "genui"] * 2 + ["coding"]
    swapped = tiny_runtime.generate(CONVERSATIONS, rows, Decoding(max_new_tokens=MAX_NEW))
    fresh = MixtureRuntime(load_base(TINY), ["chat", "agent", "coding", "genui"], max_rank=16)
    fresh.load_adapter("genui", tiny_loras["genui"])
    fresh.load_adapter("coding", tiny_loras["chat"])
    expected = fresh.generate(CONVERSATIONS, rows, Decoding(max_new_tokens=MAX_NEW))
    assert [g.token_ids for g in swapped] == [g.token_ids for g in expected]


def test_an_adapter_swapped_in_after_a_mixed_batch_answers_with_its_own_weights(tiny_runtime, tiny_loras, tmp_path):
    """A mixed batch stacks its slots' adapters once and keeps them while the slots in use stay the same: a handoff
    of another adapter of the same layout must replace them."""
    from mint.base import load_base
    from mint.mol.runtime import Decoding, MixtureRuntime
    from tests.conftest import make_lora

    other = make_lora(tmp_path / "coding-b", TINY, seed=6, r=4, alpha=16,
                      targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    rows = ["coding", "genui"] * 2 + ["coding"]
    tiny_runtime.load_adapter("genui", tiny_loras["genui"])
    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    before = tiny_runtime.generate(CONVERSATIONS, rows, Decoding(max_new_tokens=MAX_NEW))
    tiny_runtime.load_adapter("coding", other)
    after = tiny_runtime.generate(CONVERSATIONS, rows, Decoding(max_new_tokens=MAX_NEW))
    fresh = MixtureRuntime(load_base(TINY), ["chat", "agent", "coding", "genui"], max_rank=16)
    fresh.load_adapter("genui", tiny_loras["genui"])
    fresh.load_adapter("coding", other)
    expected = fresh.generate(CONVERSATIONS, rows, Decoding(max_new_tokens=MAX_NEW))
    assert [g.token_ids for g in after] == [g.token_ids for g in expected]
    assert [g.token_ids for g in before] != [g.token_ids for g in after]   # guards the test: the swap changes answers


def test_a_cleared_slot_given_the_same_adapter_again_equals_a_fresh_load(tiny_runtime, tiny_loras):
    """A handoff writes only the scales that changed; clearing a slot zeroes them, so they are written again."""
    from mint.base import load_base
    from mint.mol.runtime import Decoding, MixtureRuntime

    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    tiny_runtime.clear("coding")
    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    reloaded = tiny_runtime.generate(CONVERSATIONS, ["coding"] * 5, Decoding(max_new_tokens=MAX_NEW))
    fresh = MixtureRuntime(load_base(TINY), ["chat", "agent", "coding", "genui"], max_rank=16)
    fresh.load_adapter("coding", tiny_loras["coding"])
    expected = fresh.generate(CONVERSATIONS, ["coding"] * 5, Decoding(max_new_tokens=MAX_NEW))
    assert [g.token_ids for g in reloaded] == [g.token_ids for g in expected]


def test_an_adapter_loaded_after_the_model_is_cast_goes_into_the_cast_buffers(tiny_runtime, tiny_loras):
    """`.to()` replaces the slot buffers: a handoff planned on the old ones must not copy into them."""
    import torch

    from mint.base import load_base
    from mint.mol.runtime import Decoding, MixtureRuntime

    tiny_runtime.load_adapter("coding", tiny_loras["chat"])       # views and a load plan made on fp32 buffers
    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    tiny_runtime.model.to(torch.float64)
    tiny_runtime.load_adapter("coding", tiny_loras["chat"])
    cast = tiny_runtime.generate(CONVERSATIONS, ["coding"] * 5, Decoding(max_new_tokens=MAX_NEW))
    fresh = MixtureRuntime(load_base(TINY), ["chat", "agent", "coding", "genui"], max_rank=16)
    fresh.model.to(torch.float64)
    fresh.load_adapter("coding", tiny_loras["chat"])
    expected = fresh.generate(CONVERSATIONS, ["coding"] * 5, Decoding(max_new_tokens=MAX_NEW))
    assert [g.token_ids for g in cast] == [g.token_ids for g in expected]


def test_tensors_off_their_element_boundary_in_the_file_are_read_as_written(tiny_runtime, tiny_loras, tmp_path):
    """A safetensors file may place a tensor at any byte offset; the reader's flat per-dtype view must not be used
    for one that does not start on an element of it."""
    import shutil

    import torch
    from safetensors.torch import load_file

    moved = tmp_path / "moved"
    shutil.copytree(tiny_loras["chat"], moved)
    # copies: load_file's tensors may map the file, which is rewritten below
    tensors = {key: tensor.clone() for key, tensor in load_file(str(moved / "adapter_model.safetensors")).items()}
    first = sorted(tensors)[0]
    tensors[first] = tensors[first].to(torch.float16)     # F16 at offset 2, then F32 tensors at 2 mod 4
    header, chunks, offset = {}, [b"\0\0"], 2
    for key in sorted(tensors):
        raw = tensors[key].contiguous().numpy().tobytes()
        header[key] = {"dtype": "F16" if tensors[key].dtype == torch.float16 else "F32",
                       "shape": list(tensors[key].shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    assert any(entry["dtype"] == "F32" and entry["data_offsets"][0] % 4 for entry in header.values())
    text = json.dumps(header).encode()
    (moved / "adapter_model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + b"".join(chunks))
    tiny_runtime.load_adapter("chat", moved)
    slot = tiny_runtime.slots["chat"].index
    for key, tensor in tensors.items():
        module = tiny_runtime.modules[key.removeprefix("base_model.model.").split(".lora_")[0]]
        loaded = module.lora_a[slot, :2] if ".lora_A." in key else module.lora_b[slot, :, :2]
        assert torch.equal(loaded, tensor.float()), key


def test_an_adapter_above_the_slot_rank_is_refused_and_the_slot_kept(tiny_runtime, tiny_loras):
    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    with pytest.raises(Refused, match=r"rank 32, above the runtime's slot rank 16.*--max-rank 32"):
        tiny_runtime.load_adapter("coding", tiny_loras["wide"])
    assert tiny_runtime.slots["coding"].rank == 4


def test_adapter_for_another_architecture_is_bad_input(tiny_runtime, tiny_loras, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "other"
    shutil.copytree(tiny_loras["chat"], broken)
    tensors = load_file(str(broken / "adapter_model.safetensors"))
    tensors = {k.replace("layers.1.", "layers.7."): v for k, v in tensors.items()}
    save_file(tensors, str(broken / "adapter_model.safetensors"))
    with pytest.raises(BadInput, match="layers.7.*not a linear layer"):
        tiny_runtime.load_adapter("chat", broken)


def test_an_adapter_of_wrong_shapes_is_refused_after_one_with_the_same_modules_and_the_slot_kept(
        tiny_runtime, tiny_loras, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    tiny_runtime.load_adapter("chat", tiny_loras["chat"])
    kept = {name: module.lora_b[1].clone() for name, module in tiny_runtime.modules.items()}
    wrong = tmp_path / "wrong"
    shutil.copytree(tiny_loras["chat"], wrong)
    tensors = load_file(str(wrong / "adapter_model.safetensors"))     # the same modules, each B one row too many
    save_file({k: torch.cat([v, v[:1]]) if ".lora_B." in k else v for k, v in tensors.items()},
              str(wrong / "adapter_model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(BadInput, match=r"is \d+->\d+ in base .* but the adapter's LoRA is \d+->\d+") as refused:
        tiny_runtime.load_adapter("chat", wrong)
    assert refused.value.file == str(wrong)
    assert all(torch.equal(module.lora_b[1], kept[name]) for name, module in tiny_runtime.modules.items())
    assert tiny_runtime.slots["chat"].rank == 2


def test_a_retrained_adapter_of_the_same_layout_is_checked_once_and_its_own_weights_loaded(
        tiny_runtime, tiny_loras, tmp_path, monkeypatch):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from mint.generation import lora

    layouts = []
    original = lora._layout
    monkeypatch.setattr(lora, "_layout", lambda *args: layouts.append(args[0]) or original(*args))
    checks = []
    targets_of = tiny_runtime.adapters._targets_of
    monkeypatch.setattr(tiny_runtime.adapters, "_targets_of", lambda *args: checks.append(args[1]) or targets_of(*args))
    retrained = tmp_path / "retrained"
    shutil.copytree(tiny_loras["chat"], retrained)
    tensors = load_file(str(retrained / "adapter_model.safetensors"))
    tensors = {k: v * 3 + 1 for k, v in tensors.items()}
    save_file(tensors, str(retrained / "adapter_model.safetensors"), metadata={"format": "pt"})
    tiny_runtime.load_adapter("chat", tiny_loras["chat"])
    tiny_runtime.load_adapter("chat", retrained)
    assert len(layouts) == 1 and len(checks) == 1
    slot = tiny_runtime.slots["chat"].index
    for key, tensor in tensors.items():
        module = tiny_runtime.modules[key.removeprefix("base_model.model.").split(".lora_")[0]]
        loaded = module.lora_a[slot, :2] if ".lora_A." in key else module.lora_b[slot, :, :2]
        assert torch.equal(loaded, tensor), key


def _with_header(data: bytes, change) -> bytes:
    """A safetensors file's bytes with ``change`` applied to its first tensor's header entry."""
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    change(header[next(key for key in header if key != "__metadata__")])
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data[8 + length:]


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:-64], "ends before its tensors do"),
    (lambda data: (10**9).to_bytes(8, "little") + data[8:], "header length does not fit"),
    (lambda data: data[:8] + b"[" + data[9:], "header is not JSON"),
    (lambda data: _with_header(data, lambda entry: entry.update(dtype="I9")), "expected dtype"),
    (lambda data: _with_header(data, lambda entry: entry["shape"].insert(0, 3)), "do not hold a F32 tensor"),
])
def test_a_damaged_safetensors_file_is_bad_input_naming_it_and_the_slot_kept(tiny_runtime, tiny_loras, tmp_path,
                                                                           damage, message):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_loras["chat"], damaged)
    weights = damaged / "adapter_model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    tiny_runtime.load_adapter("chat", tiny_loras["chat"])
    with pytest.raises(BadInput, match=message) as refused:
        tiny_runtime.load_adapter("chat", damaged)
    assert refused.value.file == str(weights)
    assert tiny_runtime.slots["chat"].rank == 2 and tiny_runtime.slots["chat"].ref == str(tiny_loras["chat"])


@pytest.mark.parametrize("setting", [{"use_dora": True}, {"bias": "all"}, {"peft_type": "IA3"},
                                     {"lora_alpha": "eight"}, {"modules_to_save": ["lm_head"]}])
def test_peft_settings_the_runtime_cannot_apply_are_bad_input(tiny_runtime, tiny_loras, tmp_path, setting):
    import shutil

    odd = tmp_path / "odd"
    shutil.copytree(tiny_loras["chat"], odd)
    config = json.loads((odd / "adapter_config.json").read_text())
    config.update(setting)
    (odd / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(BadInput, match=next(iter(setting))):
        tiny_runtime.load_adapter("chat", odd)


def test_unknown_specialist_is_bad_input(tiny_runtime):
    with pytest.raises(BadInput, match="unknown specialist 'poetry'"):
        tiny_runtime.generate(CONVERSATIONS[:1], ["poetry"])


@pytest.mark.slow
def test_mixed_batch_is_token_identical_on_smollm2(tmp_path):
    from mint.base import SMOLLM2, load_base
    from mint.mol.runtime import Decoding, MixtureRuntime
    from tests.conftest import make_lora

    loras = {name: make_lora(tmp_path / name, SMOLLM2, seed=seed, r=8, alpha=16, targets=targets)
             for seed, (name, targets) in enumerate([("coding", ["q_proj", "v_proj"]),
                                                     ("agent", ["o_proj", "down_proj"])], start=1)}
    runtime = MixtureRuntime(load_base(SMOLLM2), ["coding", "agent"], max_rank=8)
    for name, path in loras.items():
        runtime.load_adapter(name, path)
    rows = ["coding", "agent", None]
    mixed = runtime.generate(CONVERSATIONS[:3], rows, Decoding(max_new_tokens=16))
    for conversation, specialist, got in zip(CONVERSATIONS[:3], rows, mixed):
        assert got.token_ids == peft_alone(SMOLLM2, loras.get(specialist), conversation, 16), specialist


def test_sync_champions_loads_each_champion_then_swaps_only_the_one_promoted(ws, crown, tiny_runtime, tiny_loras):
    from mint.base import load_base
    from mint.mol.runtime import Decoding, MixtureRuntime

    crown("coding", tiny_loras["coding"])
    crown("chat", tiny_loras["chat"])
    first = tiny_runtime.sync_champions(ws)
    assert sorted((m.specialist, m.new) for m in first) == [("chat", "chat:v1"), ("coding", "coding:v1")]
    assert tiny_runtime.sync_champions(ws) == []              # nothing moved: nothing reloaded
    crown("coding", tiny_loras["agent"])
    moves = tiny_runtime.sync_champions(ws)
    assert [(m.specialist, m.old, m.new) for m in moves] == [("coding", "coding:v1", "coding:v2")]
    after = tiny_runtime.generate(CONVERSATIONS, ["coding", "chat", "coding", None, "chat"],
                                  Decoding(max_new_tokens=MAX_NEW))
    fresh = MixtureRuntime(load_base(TINY), ["chat", "agent", "coding", "genui"])
    fresh.sync_champions(ws)
    expected = fresh.generate(CONVERSATIONS, ["coding", "chat", "coding", None, "chat"],
                              Decoding(max_new_tokens=MAX_NEW))
    assert [g.token_ids for g in after] == [g.token_ids for g in expected]
    assert after[0].served_by == "coding:v2" and after[3].served_by == "base"


def test_sync_refuses_a_champion_trained_on_another_base(ws, tiny_runtime, tiny_loras):
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote

    revision = register(ws, tiny_loras["coding"], specialist="coding", base="smollm2-135m",
                        base_fingerprint="sha256:" + "0" * 64)
    promote(ws, revision.ref, force=True, why="test")
    assert tiny_runtime.sync_champions(ws) == []
    assert tiny_runtime.slots["coding"].ref is None
    assert "trained on another base" in tiny_runtime.sync_errors["coding"]


def test_each_row_stops_at_its_own_limit_as_if_it_ran_alone(tiny_runtime, tiny_loras):
    from mint.mol.runtime import Decoding

    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    rows, limits = ["coding", None, "coding"], [3, MAX_NEW, 7]
    mixed = tiny_runtime.generate(CONVERSATIONS[:3], rows, Decoding(MAX_NEW), limits=limits)
    for conversation, specialist, limit, got in zip(CONVERSATIONS, rows, limits, mixed):
        alone = tiny_runtime.generate([conversation], [specialist], Decoding(limit))[0]
        assert (got.token_ids, got.text, got.finish_reason) == (alone.token_ids, alone.text, alone.finish_reason)
    assert [len(g.token_ids) for g in mixed] == limits   # guards the test: no row ended early at EOS


def test_incremental_text_sends_whole_characters_and_joins_to_the_final_answer(tiny_runtime):
    from mint.generation.text import IncrementalText

    tokenizer = tiny_runtime.tokenizer
    tokens = tokenizer("  Grüße, 你好 🎉 — done.  ", add_special_tokens=False)["input_ids"]
    assert any("\ufffd" in tokenizer.decode(tokens[:i]) for i in range(1, len(tokens))), \
        "precondition: some token boundary splits a character"
    stream = IncrementalText(tokenizer)
    pieces = [stream.push(tokens[:i]) for i in range(1, len(tokens) + 1)]
    final, rest = stream.finish(tokens)
    assert not any("\ufffd" in piece for piece in pieces)
    assert "".join(pieces) + rest == final == "Grüße, 你好 🎉 — done."
    assert pieces.index(next(p for p in pieces if p)) < len(tokens) - 1   # text went out before the end


def test_a_listener_that_refuses_stops_only_its_row(tiny_runtime, tiny_loras):
    from mint.mol.runtime import Decoding

    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    calls = []

    def leaves_after_three(delta):
        calls.append(delta)
        return len(calls) < 3

    def fails(delta):
        raise RuntimeError("the receiver broke")

    out = tiny_runtime.generate(CONVERSATIONS[:3], ["coding"] * 3, Decoding(MAX_NEW),
                                listeners=[leaves_after_three, fails, None])
    alone = tiny_runtime.generate(CONVERSATIONS[2:3], ["coding"], Decoding(MAX_NEW))[0]
    assert (out[0].finish_reason, len(out[0].token_ids), len(calls)) == ("cancelled", 3, 3)
    assert (out[1].finish_reason, len(out[1].token_ids)) == ("cancelled", 1)
    assert out[2].token_ids == alone.token_ids and out[2].finish_reason == alone.finish_reason


def _probe_mixture(ws, loras, *, reads, seed=3):
    """A mixture on the tiny base whose every turn the probe decides (no keywords or patterns), with the
    specialists' adapters of ``loras`` loaded and a random probe at layer 1 that reads ``reads``."""
    from dataclasses import replace

    import torch

    from mint.base import load_base
    from mint.mol.mixture import Mixture
    from mint.routing.router import Probe, Router, probe_features
    from mint.mol.runtime import MixtureRuntime
    from mint.project import DEFAULT_PROJECT, Project

    project = Project(base=TINY, specialists=tuple(replace(s, keywords=(), patterns=())
                                                   for s in DEFAULT_PROJECT.specialists))
    runtime = MixtureRuntime(load_base(TINY), project.names, max_rank=16)
    for name in project.names:
        runtime.load_adapter(name, loras[name])
    hidden = runtime.model.config.hidden_size
    generator = torch.Generator().manual_seed(seed)
    # standardized as a fitted probe would be, so that its random weights send the turns different ways
    seen = probe_features(runtime.model, runtime.tokenizer, [[{"role": "user", "content": t}] for t in ROUTED], 1,
                          reads)
    probe = Probe(project.names, 1, torch.randn(len(project.names), hidden, generator=generator),
                  torch.zeros(len(project.names)), seen.mean(0), seen.std(0), reads=reads)
    mixture = Mixture(ws, project, runtime)
    mixture.router = Router(project, probe, "router:test")
    return mixture


ROUTED = ["What do you think about rainy Sundays?", "Write a Python function that reverses a list.",
          "Book me a table for two tomorrow at eight.", "hi", "Make a signup form with email and a submit button.",
          "tell me a story about a fox", "how do i sort a dict by value", "remind me at 6"]


def test_a_probe_routed_answer_equals_the_chosen_specialist_answering_alone(ws, tiny_loras):
    """Adapters that change the layers the probe reads: routing runs its own pass on the bare base (the
    probe's features never see an adapter), and the routed turn's answer is token for token what the chosen
    specialist gives when forced."""
    import torch

    from mint.base import load_base
    from mint.mol.mixture import Turn
    from mint.routing.router import PROMPT, prompt_features
    from mint.mol.runtime import Decoding

    mixture = _probe_mixture(ws, tiny_loras, reads=PROMPT)
    runtime = mixture.runtime
    assert runtime.shared_layers() == 0 and not mixture.routes_in_prefill()
    text = "What do you think about rainy Sundays?"
    conversation = [{"role": "user", "content": text}]
    runtime.generate(CONVERSATIONS, ["coding", "agent", None, "genui", "chat"], Decoding(2))   # a mixed batch first
    bare = load_base(TINY)
    assert torch.equal(mixture.features([conversation], 1, PROMPT),
                       prompt_features(bare.model, bare.tokenizer, [conversation], 1))
    [routed] = mixture.answer([Turn(conversation, decoding=Decoding(MAX_NEW))], keep_for_feedback=False)
    assert routed.route.decided_by == "probe"
    forced = runtime.generate([conversation], [routed.specialist], Decoding(MAX_NEW))[0]
    assert (routed.text, routed.completion_tokens, routed.finish_reason) == \
        (forced.text, len(forced.token_ids), forced.finish_reason)
    assert routed.route_ms < routed.latency_ms


@pytest.fixture(scope="module")
def upper_loras(tmp_path_factory):
    """The four specialists' adapters of the tiny base, changing its second (last) decoder layer only: what
    mint train makes by default (lora.from_layer: router)."""
    from tests.conftest import make_lora

    root = tmp_path_factory.mktemp("upper")
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return {name: make_lora(root / name, TINY, seed=10 + i, r=4 + 4 * i, alpha=8, targets=targets, layers=[1])
            for i, name in enumerate(("chat", "agent", "coding", "genui"))}


def test_routing_inside_the_prefill_equals_routing_in_a_pass_of_its_own(ws, upper_loras, monkeypatch):
    """Adapters that leave the probe's layers to the base: the turn is routed inside its own prefill, to the
    same specialist with the same probabilities as a pass of its own gives, and each answer is token for token
    the chosen specialist's answering alone; no pass of the probe's own runs."""
    from mint.mol.mixture import Turn
    from mint.routing.router import PROMPT
    from mint.mol.runtime import Decoding

    mixture = _probe_mixture(ws, upper_loras, reads=PROMPT)
    assert mixture.runtime.shared_layers() == 1 and mixture.routes_in_prefill()
    turns = [Turn([{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
                  if i % 3 == 0 else [{"role": "user", "content": text}], decoding=Decoding(MAX_NEW))
             for i, text in enumerate(ROUTED)]
    turns.append(Turn([{"role": "user", "content": "Write a haiku."}], specialist="genui", decoding=Decoding(MAX_NEW)))
    separate, _ms = mixture.route(turns)
    assert len({r.specialist for r in separate}) >= 3        # the random probe spreads the turns around

    def no_pass_of_its_own(*_args):
        raise AssertionError("the probe's own pass ran")

    monkeypatch.setattr(mixture, "features", no_pass_of_its_own)
    answers = mixture.answer(turns, keep_for_feedback=False)
    for turn, answer, expected in zip(turns, answers, separate):
        assert answer.specialist == expected.specialist and answer.route.decided_by == expected.decided_by
        for name, p in expected.probabilities.items():
            assert answer.route.probabilities[name] == pytest.approx(p, abs=1e-4)
        alone = mixture.runtime.generate([turn.messages], [answer.specialist], Decoding(MAX_NEW))[0]
        assert answer.served_by == alone.served_by and answer.text == alone.text
    assert answers[-1].route.decided_by == "forced"


def test_an_adapter_that_changes_a_layer_the_probe_reads_turns_routing_back_to_its_own_pass(ws, upper_loras,
                                                                                           tiny_loras):
    from mint.routing.router import PROMPT, TURN
    from mint.mol.runtime import Decoding, PrefillRoute

    mixture = _probe_mixture(ws, upper_loras, reads=PROMPT)
    mixture.runtime.load_adapter("coding", tiny_loras["coding"])        # all layers
    assert mixture.runtime.shared_layers() == 0 and not mixture.routes_in_prefill()
    with pytest.raises(Refused, match="below the router's layer 1"):
        mixture.runtime.generate(CONVERSATIONS[:1], [None], Decoding(2),
                                 route=PrefillRoute((1,), (0,), lambda rows, features: ["chat"] * len(rows)))
    mixture.runtime.load_adapter("coding", upper_loras["coding"])
    assert mixture.routes_in_prefill()
    # a probe saved before prompt features reads the last user message alone: never the prefill's states
    assert not mixture.routes_in_prefill(_probe_mixture(ws, upper_loras, reads=TURN).router)


def test_rows_that_join_a_running_generation_answer_as_alone_and_a_bad_one_fails_alone(tiny_runtime, tiny_loras):
    from mint.mol.runtime import Ask, Decoding

    tiny_runtime.load_adapter("coding", tiny_loras["coding"])
    conversation = CONVERSATIONS[0]
    [coding_alone] = tiny_runtime.generate([conversation], ["coding"], Decoding(6))
    offered = [[Ask(conversation, "coding", Decoding(6)), Ask([{"role": "user", "content": "word " * 3000}])]]
    told: list = []
    results = tiny_runtime.generate([conversation], [None], Decoding(10), batch_size=3,
                                    joining=lambda room: offered.pop() if offered else [],
                                    on_generated=lambda row, out: told.append((row, out)))
    assert [row for row, _out in told] == [2, 1, 0]       # the bad row at once, then each as it finished
    assert isinstance(results[2], BadInput) and results[2].field == "messages"
    assert (results[1].token_ids, results[1].served_by) == (coding_alone.token_ids, coding_alone.served_by)
    assert results[0].finish_reason == "length" and len(results[0].token_ids) == 10


def test_a_slot_load_that_waits_for_a_stream_stops_rows_joining_it(tiny_runtime, tiny_loras):
    """A champion load waits for the running stream (a running row's adapter never changes under it), and the
    stream takes no more joining rows meanwhile, so the load goes next however many turns keep coming."""
    import threading
    import time

    from mint.mol.runtime import Ask, Decoding

    joined, loader = [], threading.Thread(target=tiny_runtime.load_adapter, args=("coding", tiny_loras["coding"]))

    def joining(room):             # an endless supply of turns (bounded here so a failure cannot hang)
        joined.append(room)
        return [Ask(CONVERSATIONS[1], "coding", Decoding(4))] if len(joined) < 60 else []

    def heard(_delta):
        if not loader.is_alive() and not loader.ident:   # a load is asked during the stream, from another thread
            loader.start()
            deadline = time.monotonic() + 60
            while not tiny_runtime.swap_waiting:
                assert time.monotonic() < deadline, "the load never said it waits"
                time.sleep(0.001)
            heard.asked_at = len(joined)
        return True

    results = tiny_runtime.generate([CONVERSATIONS[0]], ["coding"], Decoding(12), listeners=[heard], batch_size=2,
                                    joining=joining)
    loader.join(timeout=60)
    # no row was asked for once the load waited; each ask before it gave one row
    assert len(joined) == heard.asked_at < 60 and len(results) == 1 + heard.asked_at
    assert all(r.served_by == "base" for r in results)   # every row ran before the load, on the empty slot
    assert tiny_runtime.served_by("coding") != "base"
