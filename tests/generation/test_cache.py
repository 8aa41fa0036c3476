"""The running batch's KV cache: rows that leave and join keep every value of the rows that stay, in buffers with
room to grow (roomy layers) or as plain tensors (layers mint leaves to transformers)."""
import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from mint.generation import cache as kv

HEADS, WIDTH = 3, 4


def filled_cache(rows: int, columns: int, seed: int, layers: int = 2) -> DynamicCache:
    generator = torch.Generator().manual_seed(seed)
    cache = DynamicCache()
    cache.layers = []
    for _ in range(layers):
        layer = DynamicLayer()
        layer.keys = torch.randn(rows, HEADS, columns, WIDTH, generator=generator)
        layer.values = torch.randn(rows, HEADS, columns, WIDTH, generator=generator)
        layer.device, layer.is_initialized = layer.keys.device, True
        cache.layers.append(layer)
    return kv.with_room(cache)


def grown(cache, columns: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values after ``columns`` more decode steps, as plain tensors."""
    rows = cache.layers[0].keys.shape[0]
    for step in range(columns):
        for layer in cache.layers:
            column = torch.full((rows, HEADS, 1, WIDTH), float(step + 1))
            layer.update(column, -column)
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


@pytest.mark.parametrize("room", [kv.KV_ROOM, 3, 0])
def test_rows_that_leave_take_only_themselves_and_the_columns_no_row_reads(monkeypatch, room):
    monkeypatch.setattr(kv, "KV_ROOM", room)
    cache = filled_cache(rows=5, columns=7, seed=0)
    grown(cache, 2)        # the buffers hold columns past the prompt (and, with room 3, were refilled once)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    mask = torch.ones(5, 9, dtype=torch.long)
    mask[:, :2] = 0            # left padding in every row
    mask[1, 2:4] = 0           # and in a row that stays: its columns stay for the others
    mask[4, :] = 0
    mask[4, 6] = 1             # a column only a leaving row reads
    mask[:4, 6] = 0
    cache, kept_mask = kv.select(cache, mask, [3, 0, 1])

    columns = [2, 3, 4, 5, 7, 8]
    assert torch.equal(kept_mask, mask[[3, 0, 1]][:, columns])
    for layer, (keys, values) in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys[[3, 0, 1]][:, :, columns])
        assert torch.equal(layer.values, values[[3, 0, 1]][:, :, columns])
    after = grown(cache, 4)    # and the rows go on from there
    for (keys, values), (old_keys, _) in zip(after, before):
        assert torch.equal(keys[:, :, :6], old_keys[[3, 0, 1]][:, :, columns])
        assert torch.equal(keys[:, :, 6:, 0], torch.arange(1.0, 5.0).expand(3, HEADS, 4))
        assert torch.equal(values[:, :, 6:], -keys[:, :, 6:])


@pytest.mark.parametrize("room", [kv.KV_ROOM, 3, 0])
@pytest.mark.parametrize("running_columns, joining_columns", [(6, 4), (4, 6), (5, 5)])
def test_rows_that_join_come_below_with_the_shorter_side_left_padded_by_masked_zeros(monkeypatch, room,
                                                                                       running_columns,
                                                                                       joining_columns):
    monkeypatch.setattr(kv, "KV_ROOM", room)
    running, joining = filled_cache(2, running_columns, seed=1), filled_cache(3, joining_columns, seed=2)
    running_before = [(layer.keys.clone(), layer.values.clone()) for layer in running.layers]
    joining_before = [(layer.keys.clone(), layer.values.clone()) for layer in joining.layers]
    mask = torch.ones(2, running_columns, dtype=torch.long)
    mask[1, 0] = 0
    cache, joined_mask = kv.join(running, mask, joining, torch.ones(3, joining_columns, dtype=torch.long))

    width = max(running_columns, joining_columns)
    assert joined_mask.shape == (5, width)
    assert torch.equal(joined_mask[:2, width - running_columns:], mask)
    assert torch.equal(joined_mask[2:, width - joining_columns:], torch.ones(3, joining_columns, dtype=torch.long))
    assert not joined_mask[:2, :width - running_columns].any() and not joined_mask[2:, :width - joining_columns].any()
    for layer, (keys, values), (new_keys, new_values) in zip(cache.layers, running_before, joining_before):
        assert layer.keys.shape == (5, HEADS, width, WIDTH)
        assert torch.equal(layer.keys[:2, :, width - running_columns:], keys)
        assert torch.equal(layer.values[2:, :, width - joining_columns:], new_values)
        assert torch.equal(layer.keys[2:, :, width - joining_columns:], new_keys)
        assert not layer.keys[:2, :, :width - running_columns].any()
        assert not layer.values[2:, :, :width - joining_columns].any()
    after = grown(cache, 2)
    assert all(keys.shape == (5, HEADS, width + 2, WIDTH) for keys, _ in after)


def test_after_rows_leave_and_join_the_next_steps_write_in_place():
    """A row change leaves its buffers with room: the KV_ROOM steps after it make no buffer again."""
    cache = filled_cache(rows=4, columns=6, seed=3)
    mask = torch.ones(4, 6, dtype=torch.long)
    mask[2, :3] = 0
    cache, mask = kv.select(cache, mask, [0, 1, 3])
    cache, mask = kv.join(cache, mask, filled_cache(rows=2, columns=3, seed=4), torch.ones(2, 3, dtype=torch.long))
    buffers = [id(layer.key_buffer) for layer in cache.layers]
    grown(cache, kv.KV_ROOM)
    assert [id(layer.key_buffer) for layer in cache.layers] == buffers


def test_layers_of_other_shapes_in_one_cache_each_keep_their_own_rows_and_columns():
    """Roomy layers beside a layer mint leaves to transformers (another buffer length), values wider than keys
    (as in latent-attention models), heads that differ between layers: one row change gathers each right."""
    generator = torch.Generator().manual_seed(5)

    class LeftAlone(DynamicLayer):      # with_room leaves every layer that is not a plain DynamicLayer
        pass

    cache = DynamicCache()
    cache.layers = []
    for layer_class, heads in ((DynamicLayer, HEADS), (LeftAlone, HEADS), (DynamicLayer, 2)):
        layer = layer_class()
        layer.keys = torch.randn(4, heads, 5, WIDTH, generator=generator)
        layer.values = torch.randn(4, heads, 5, WIDTH + 2, generator=generator)
        layer.device, layer.is_initialized = layer.keys.device, True
        cache.layers.append(layer)
    cache = kv.with_room(cache)
    assert [kv._roomy(layer) for layer in cache.layers] == [True, False, True]
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    mask = torch.ones(4, 5, dtype=torch.long)
    mask[:, 0] = 0
    mask[2, 1] = 0
    cache, kept_mask = kv.select(cache, mask, [2, 0])

    assert torch.equal(kept_mask, mask[[2, 0]][:, 1:])
    for layer, (keys, values) in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys[[2, 0]][:, :, 1:])
        assert torch.equal(layer.values, values[[2, 0]][:, :, 1:])
