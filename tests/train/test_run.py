"""The run's steps: chat template handling, effective settings, resume, processes, progress."""
import json
import os

import pytest

from mint import hardware
from mint.data.ingest import ingest
from mint.errors import BadInput, Refused
from mint.registry import store
from mint.train.run import RUN_FILE, TrainRequest, check_request, prepare_run, train
from tests.conftest import run_mint, write_jsonl

FAST = ["max_steps=2", "save_steps=2", "per_device_train_batch_size=2", "lora.r=4", "max_length=128"]
PLAIN = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
DASH_MARKERS = ("{%- for m in messages %}{%- if m['role'] == 'assistant' %}<|im_start|>assistant\n"
                "{%- generation %}{{ m['content'] }}<|im_end|>{%- endgeneration %}\n{%- else %}<|im_start|>"
                "{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endif %}{%- endfor %}"
                "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")


@pytest.fixture
def dataset(ws, project, tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"Write a python function that returns {i}"},
                          {"role": "assistant", "content": f"def f():\n    return {i}"}],
             "specialist": "coding"} for i in range(6)]
    ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", rows)], dataset="logs", project=project)
    return "logs"


def local_base(path, template):
    from mint.base import TINY, load_base

    loaded = load_base(TINY)
    loaded.model.save_pretrained(path)
    loaded.tokenizer.chat_template = template
    loaded.tokenizer.save_pretrained(path)
    return str(path)


def test_a_local_base_whose_template_cannot_mask_assistant_turns_is_refused(ws, dataset, tmp_path):
    base = local_base(tmp_path / "plain-base", PLAIN)
    with pytest.raises(BadInput, match=r"trl.assistant_only_loss: the base's chat template has no \{% generation"):
        train(ws, specialist="coding", data=dataset, method="sft", base=base, sets=FAST)
    assert not (ws.home / "runs").exists() or not any((ws.home / "runs").iterdir())


def test_a_local_base_with_trimmed_generation_markers_trains_on_assistant_turns_only(ws, dataset, tmp_path):
    base = local_base(tmp_path / "marked-base", DASH_MARKERS)
    result = train(ws, specialist="coding", data=dataset, method="sft", base=base, sets=FAST[1:] + ["max_steps=1"])
    effective = json.load(open(os.path.join(result.run_dir, RUN_FILE)))["effective"]
    assert effective["chat_template"]["source"] == "base (has generation markers)"
    assert effective["backend"]["assistant_only_loss"] is True and effective["backend"]["world_size"] == 1
    # the precision is this machine's: bf16 autocast where the CPU has bf16 instructions, else fp32
    expected = "bf16" if hardware.detect().bf16 else "fp32"
    assert effective["backend"]["precision"] == expected and effective["base_fingerprint"].startswith("sha256:")


def test_without_assistant_only_loss_the_base_keeps_its_own_template(ws, dataset, tmp_path):
    base = local_base(tmp_path / "plain-base", PLAIN)
    plan = check_request(ws, TrainRequest(specialist="coding", data=dataset, method="sft", base=base,
                                          sets=("assistant_only_loss=false",)))
    run = json.load(open(prepare_run(ws, plan) / RUN_FILE))
    assert run["effective"]["chat_template"] == {"source": "base", "sha256": None}
    assert run["settings"]["trl"]["assistant_only_loss"] is False


def test_from_records_the_parents_lora_config_and_refuses_to_change_it(ws, dataset, candidate):
    parent = candidate("coding")
    with pytest.raises(BadInput, match="lora.r: --from continues coding:v1's adapter"):
        check_request(ws, TrainRequest(specialist="coding", data=dataset, method="sft", from_ref=parent.ref,
                                       sets=("lora.r=8",)))
    plan = check_request(ws, TrainRequest(specialist="coding", data=dataset, method="sft", from_ref=parent.ref))
    lora = json.load(open(prepare_run(ws, plan) / RUN_FILE))["effective"]["lora"]
    assert lora["source"] == "parent coding:v1" and lora["r"] == 4 and sorted(lora["target_modules"]) == \
        ["q_proj", "v_proj"]


def test_a_tool_environment_shows_its_tools_in_the_agent_harness_words_and_parses_the_calls_back(ws):
    from transformers.utils import get_json_schema
    from trl.chat_template_utils import parse_response

    from mint.base import TINY, load_tokenizer
    from mint.harness.agent import AgentHarness
    from mint.harness.base import HarnessSettings
    from mint.train.envs import OrdersCalendar
    from mint.train.trainer import _add_tool_response_parser

    plan = check_request(ws, TrainRequest(specialist="agent", method="grpo", env="orders", base="tiny-random"))
    run = json.load(open(prepare_run(ws, plan) / RUN_FILE))
    assert run["effective"]["chat_template"]["source"].startswith("mint: SmolLM2 ChatML")
    tokenizer = load_tokenizer(TINY)
    tokenizer.chat_template = (ws.home / "runs" / run["run"] / "chat_template.jinja").read_text()
    tools = [get_json_schema(getattr(OrdersCalendar, n)) for n in ("list_orders", "cancel_order")]
    for prompt in (OrdersCalendar.tasks(1)[0]["prompt"], [{"role": "user", "content": "Cancel B42."}]):
        shown = tokenizer.apply_chat_template(prompt, tools=tools, tokenize=False, add_generation_prompt=True)
        system = AgentHarness(HarnessSettings()).system({"messages": prompt, "tools": tools})
        assert shown.startswith(f"<|im_start|>system\n{system}<|im_end|>") and "Qwen" not in shown
    _add_tool_response_parser(tokenizer)
    prefix = tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, return_dict=True)
    answer = tokenizer('<tool_call>{"name": "cancel_order", "arguments": {"order_id": "B42"}}</tool_call><|im_end|>',
                       add_special_tokens=False)["input_ids"]
    parsed = parse_response(tokenizer, answer, prefix=prefix["input_ids"], tools=tools)
    assert parsed["tool_calls"][0]["function"] == {"name": "cancel_order", "arguments": {"order_id": "B42"}}


def killed_run(ws, dataset, step, sets=("max_steps=4", "save_steps=1", "per_device_train_batch_size=2",
                                         "max_length=128", "lora.r=4")):
    sets = list(sets)
    killed = run_mint("train", "--specialist", "coding", "--data", dataset, "--method", "sft", "--base",
                      "tiny-random", *[x for s in sets for x in ("--set", s)], env={"MINT_FAULT": f"train.step_{step}"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    (run_dir,) = (ws.home / "runs").iterdir()
    return run_dir, sets


def lora_tensors(path):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "adapter_model.safetensors"))


def test_a_run_killed_after_step_2_and_resumed_ends_with_the_uninterrupted_runs_adapter(ws, dataset):
    import torch

    run_dir, sets = killed_run(ws, dataset, 3)
    at_step_2 = lora_tensors(run_dir / "checkpoints" / "checkpoint-2")
    resumed = train(ws, resume=run_dir.name)
    assert resumed.resumed_from_step == 2 and resumed.steps == 4
    whole = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=sets)
    first, second = lora_tensors(os.path.join(resumed.run_dir, "adapter")), lora_tensors(
        os.path.join(whole.run_dir, "adapter"))
    assert first.keys() == second.keys() and first
    assert any(not torch.equal(at_step_2[k], first[k]) for k in first)   # steps 3 and 4 changed the weights
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=1e-4, atol=1e-6)


def test_a_padding_free_run_killed_mid_step_resumes_padding_free_to_the_whole_runs_adapter(ws, dataset):
    import torch

    run_dir, sets = killed_run(ws, dataset, 3, sets=("max_steps=4", "save_steps=1", "per_device_train_batch_size=2",
                                                     "lora.r=4"))
    resumed = train(ws, resume=run_dir.name)
    backend = json.load(open(os.path.join(resumed.run_dir, RUN_FILE)))["effective"]["backend"]
    assert resumed.resumed_from_step == 2 and backend["padding_free"] is True
    whole = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=sets)
    first, second = (lora_tensors(os.path.join(r.run_dir, "adapter")) for r in (resumed, whole))
    assert first.keys() == second.keys() and first
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=1e-4, atol=1e-6)


def test_resume_refuses_a_checkpoint_changed_since_it_was_saved(ws, dataset):
    from safetensors.torch import save_file

    run_dir, _ = killed_run(ws, dataset, 2)
    checkpoint = run_dir / "checkpoints" / "checkpoint-1"
    tensors = lora_tensors(checkpoint)
    name = sorted(k for k in tensors if "lora_B" in k)[0]
    tensors[name] = tensors[name] + 0.5
    save_file(tensors, str(checkpoint / "adapter_model.safetensors"))
    with pytest.raises(Refused, match="checkpoint-1 of run .* holds another adapter than the one saved at step 1"):
        train(ws, resume=run_dir.name)
    assert not store.db_path(ws).exists() or not store.list_revisions(store.open_store(ws)).revisions


def test_piped_output_prints_one_line_per_logged_step_with_loss_and_eta(ws, dataset):
    child = run_mint("train", "--specialist", "coding", "--data", dataset, "--method", "sft", "--base",
                     "tiny-random", *[x for s in FAST for x in ("--set", s)])
    assert child.returncode == 0, child.stderr[-2000:]
    lines = [l for l in child.stderr.splitlines() if l.startswith("step ")]
    assert [l.split()[1] for l in lines] == ["1/2", "2/2"], child.stderr
    assert all("loss " in l for l in lines) and "ETA 0:" in lines[-1]
    assert "loading base tiny-random..." in child.stderr and "coding:v1" in child.stdout


def test_weight_0_turns_under_a_foreign_template_become_per_turn_rows_and_say_so():
    from mint.train.config import TrainSettings
    from mint.train.run import MINT_TEMPLATE, rows_for_template

    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x", "weight": 0},
                          {"role": "user", "content": "b"}, {"role": "assistant", "content": "y"}]}]
    settings = TrainSettings("sft", {}, {"assistant_only_loss": True}, ())
    same = rows_for_template("sft", rows, MINT_TEMPLATE, settings)
    assert same == (rows, settings, {})
    split, changed_settings, changed = rows_for_template("sft", rows, "base (has generation markers)", settings)
    assert [r["completion"][0]["content"] for r in split] == ["y"]
    assert changed_settings.trl["assistant_only_loss"] is False and "trl.assistant_only_loss" in changed


# a template that renders an assistant's reasoning (Qwen3's way: <think> before the answer), with generation markers
THINKING = ("{%- for m in messages %}{%- if m['role'] == 'assistant' %}<|im_start|>assistant\n{%- generation %}"
            "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{%- endif %}{{ m['content'] }}"
            "<|im_end|>{%- endgeneration %}\n{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")


@pytest.fixture
def reasoning_dataset(ws, project, tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                          {"role": "assistant", "content": str(2 * i), "reasoning_content": f"{i} doubled"}],
             "specialist": "coding"} for i in range(8)]
    ingest(ws, [write_jsonl(tmp_path / "r.jsonl", rows)], dataset="r", project=project)
    return "r"


def _rows(run_dir):
    return [json.loads(line) for line in open(run_dir / "examples.jsonl")]


def test_reasoning_trains_where_the_chat_template_renders_it(ws, reasoning_dataset, tmp_path):
    base = local_base(tmp_path / "thinking-base", THINKING)
    run_dir = prepare_run(ws, check_request(ws, TrainRequest(specialist="coding", data=reasoning_dataset,
                                                             method="sft", base=base)))
    rows = _rows(run_dir)     # the training split's: the held-out split's episodes are not among them
    answers = [m for row in rows for m in row["messages"] if m["role"] == "assistant"]
    assert answers and all(m["reasoning_content"] == f"{int(m['content']) // 2} doubled" for m in answers)
    assert json.load(open(run_dir / RUN_FILE))["effective"]["reasoning"]["trained"] == len(answers)
    from mint.base import load_tokenizer

    shown = load_tokenizer(base).apply_chat_template(rows[0]["messages"], tokenize=False)
    assert "<think>" in shown and "doubled</think>" in shown


@pytest.mark.parametrize("base, sets, why", [
    ("tiny-random", (), "the chat template has no place for reasoning"),
    ("thinking", ("examples.reasoning=false",), "examples.reasoning is false"),
])
def test_reasoning_is_left_out_and_counted_where_the_template_cannot_render_it_or_it_is_not_wanted(
        ws, reasoning_dataset, tmp_path, base, sets, why):
    if base == "thinking":
        base = local_base(tmp_path / "thinking-base", THINKING)
    run_dir = prepare_run(ws, check_request(ws, TrainRequest(specialist="coding", data=reasoning_dataset,
                                                             method="sft", base=base, sets=sets)))
    rows = _rows(run_dir)
    assert rows and not any("reasoning" in key for row in rows for m in row["messages"] for key in m)
    reasoning = json.load(open(run_dir / RUN_FILE))["effective"]["reasoning"]
    assert (reasoning["turns"], reasoning["left_out"], reasoning["trained"]) == (len(rows), len(rows), 0)
    assert why in reasoning["why"]


def test_a_finished_run_says_how_much_reasoning_it_left_out(ws, reasoning_dataset):
    result = train(ws, specialist="coding", data=reasoning_dataset, method="sft", base="tiny-random",
                   sets=FAST[1:] + ["max_steps=1"])
    assert result.warnings[0].startswith(f"{result.examples} assistant turn(s)' reasoning left out: the chat template "
                                         "has no place")


@pytest.fixture
def uneven_dataset(ws, project, tmp_path):
    """Tool-calling conversations, one with an answer ten times longer than the others'."""
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    rows = [{"messages": [{"role": "user", "content": f"Look up item {i}"},
                          {"role": "assistant", "content": "Item " + " and".join(f" part {k}" for k in
                                                                                 range(400 if i == 3 else 40))}],
             "tools": tools, "specialist": "agent"} for i in range(6)]
    ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", rows)], dataset="uneven", project=project)
    return "uneven"


def _prepared_trainer(ws, sets):
    from mint.jsonl import read_jsonl
    from mint.train.trainer import build_trainer, load_run_base

    run_dir = prepare_run(ws, check_request(ws, TrainRequest(specialist="agent", data="uneven", method="sft",
                                                             base="tiny-random", sets=tuple(sets))))
    run = json.loads((run_dir / RUN_FILE).read_text())
    rows = [row for _n, row in read_jsonl(run_dir / "examples.jsonl")]
    loaded = load_run_base(run_dir, run)
    return run, build_trainer(run_dir, run, loaded.model, loaded.tokenizer, rows)


def test_sft_max_length_is_the_longest_example_so_truncation_cuts_no_answer(ws, uneven_dataset):
    run, trainer = _prepared_trainer(ws, FAST[:-1] + ["padding_free=false"])          # padded, no max_length set
    lengths = [len(row["input_ids"]) for row in trainer.train_dataset]
    assert run["settings"]["trl"]["max_length"] == max(lengths) > 3 * sorted(lengths)[0]
    assert run["effective"]["max_length"]["value"] == max(lengths)
    # the longest example kept its answer to the end: its last trained token is its last token but the newline
    longest = trainer.train_dataset[lengths.index(max(lengths))]
    assert longest["labels"][-2] != -100


def test_padding_free_sft_cuts_no_row_and_records_the_longest(ws, uneven_dataset):
    run, trainer = _prepared_trainer(ws, FAST[:-1])          # mint's defaults on a CPU: padding-free
    lengths = [len(row["input_ids"]) for row in trainer.train_dataset]
    assert run["settings"]["trl"]["padding_free"] is True and run["settings"]["trl"]["max_length"] is None
    assert trainer.args.padding_free and trainer.args.max_length is None
    assert run["effective"]["max_length"] == {"value": None, "longest": max(lengths), "reason": (
        f"padding-free batches cut no row (the longest of the 6 examples: {max(lengths)} tokens, median "
        f"{sorted(lengths)[3]})")}
    # the longest example kept its answer to the end: its last trained token is its last token but the newline
    longest = trainer.train_dataset[lengths.index(max(lengths))]
    assert longest["labels"][-2] != -100


def test_a_max_length_the_user_sets_is_kept(ws, uneven_dataset):
    run, trainer = _prepared_trainer(ws, FAST[:-1] + ["max_length=300"])
    assert run["settings"]["trl"]["max_length"] == 300 and "max_length" not in run["effective"]
    assert max(len(row["input_ids"]) for row in trainer.train_dataset) == 300


@pytest.mark.parametrize("max_length, attention", [(64, "eager"), (300, "sdpa"), (None, hardware.ROW_ATTENTION)])
def test_an_sft_run_trains_with_the_attention_its_rows_length_calls_for(ws, uneven_dataset, max_length, attention):
    # a max_length of the user's pads the batches (TRL cuts rows only when it pads them); without one they join
    _run, trainer = _prepared_trainer(ws, FAST[:-1] + ([f"max_length={max_length}"] if max_length else []))
    assert trainer.model.get_base_model().config._attn_implementation == attention
    assert trainer.args.padding_free is (max_length is None)


def test_a_padding_free_run_trains_as_the_padded_run_does(ws, uneven_dataset):
    import torch

    sets = FAST[:-1] + ["bf16=false", "max_steps=3", "learning_rate=0.01"]
    joined = train(ws, specialist="agent", data=uneven_dataset, method="sft", base="tiny-random", sets=sets)
    padded = train(ws, specialist="agent", data=uneven_dataset, method="sft", base="tiny-random",
                   sets=sets + ["padding_free=false"])
    runs = [json.load(open(os.path.join(r.run_dir, RUN_FILE))) for r in (joined, padded)]
    assert [r["effective"]["backend"]["padding_free"] for r in runs] == [True, False]
    assert runs[0]["effective"]["backend"]["attention"]["value"] == hardware.ROW_ATTENTION
    # the same examples in the same batches: the same losses and adapter, to fp32 rounding
    losses = [[json.loads(line)["loss"] for line in open(os.path.join(r.run_dir, "metrics.jsonl")) if '"loss"' in line]
              for r in (joined, padded)]
    assert len(losses[0]) == 3 and losses[0] == pytest.approx(losses[1], rel=1e-4)
    first, second = (lora_tensors(os.path.join(r.run_dir, "adapter")) for r in (joined, padded))
    assert first.keys() == second.keys() and first
    assert all(torch.allclose(first[k], second[k], rtol=1e-3, atol=1e-6) for k in first)


def test_a_max_length_of_the_users_turns_padding_free_off_and_says_so(ws, uneven_dataset):
    run, _trainer = _prepared_trainer(ws, FAST)
    choice = run["settings"]["hardware"]["choices"]["padding_free"]
    assert run["settings"]["trl"]["padding_free"] is False and choice["turned_by_user_settings"] is False


def test_bf16_sft_stores_the_frozen_weights_in_bf16_and_trains_the_same_adapter(ws, dataset, monkeypatch):
    import torch

    from mint.train import trainer as trainer_module

    sets = FAST + ["bf16=true", "max_steps=3", "learning_rate=0.01"]
    cast = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=sets)
    backend = json.load(open(os.path.join(cast.run_dir, RUN_FILE)))["effective"]["backend"]
    assert backend["precision"] == "bf16" and backend["frozen_weights"].startswith("bf16, cast once")
    monkeypatch.setattr(trainer_module, "frozen_weights_at_compute_precision", lambda trainer: None)
    kept = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=sets)
    assert "frozen_weights" not in json.load(open(os.path.join(kept.run_dir, RUN_FILE)))["effective"]["backend"]
    # autocast rounds the fp32 weights to the same bf16 values at every forward: the same run, bit for bit
    first, second = lora_tensors(os.path.join(cast.run_dir, "adapter")), lora_tensors(
        os.path.join(kept.run_dir, "adapter"))
    assert first.keys() == second.keys() and first
    assert all(torch.equal(first[k], second[k]) for k in first)
    losses = [[json.loads(line).get("loss") for line in open(os.path.join(run, "metrics.jsonl"))]
              for run in (cast.run_dir, kept.run_dir)]
    assert losses[0] == losses[1] and any(loss is not None for loss in losses[0])


def test_an_fp32_run_keeps_its_frozen_weights_as_they_are(ws, uneven_dataset):
    import torch

    _run, trainer = _prepared_trainer(ws, FAST + ["bf16=false"])
    assert trainer.mint_frozen_weights is None
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}


def test_a_renamed_specialists_run_records_its_harness_and_trains_with_that_harnesss_reward(ws):
    """A project whose coding specialist is called `code` and whose tool specialist is `tools`: the run records
    the harness mint.yaml names, and GRPO's default reward is that harness's (the specialist's name has none)."""
    from mint.harness import specialist as registered
    from mint.train.rewards import reward_functions

    (ws.home.parent / "mint.yaml").write_text(
        "base: tiny-random\nspecialists:\n  talk: {harness: chat, keywords: [hello]}\n"
        "  tools: {harness: agent, tool_use: true, keywords: [book]}\n  code: {harness: coding, keywords: [python]}\n")
    plan = check_request(ws, TrainRequest(specialist="tools", method="grpo", env="orders", base="tiny-random"))
    run = json.load(open(prepare_run(ws, plan) / RUN_FILE))
    assert (run["specialist"], run["harness"]) == ("tools", "agent")
    assert reward_functions("code", (), "coding") == [registered("coding").reward]
    with pytest.raises(BadInput, match="no default reward for specialist 'code'"):
        reward_functions("code", ())
