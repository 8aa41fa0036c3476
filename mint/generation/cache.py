"""The running batch's KV cache: buffers with room to grow in place, rows joining and leaving.

A decode step writes its column into room allocated ahead (``KV_ROOM`` columns) instead of copying the whole
cache (DynamicCache's torch.cat, ~9% of a step at batch 16 with 150 tokens cached). Rows that join are
appended below with the shorter side left-padded by masked zeros; rows that leave are dropped with every column
masked in all the rows that stay (left padding, refused drafts), since masked keys change no output and cost a
step its time. Either change copies the cache once, straight into a buffer with room, where a copy to cut, another
to pad and a third to make room took 1.2-1.5x as long (scripts/bench_cache.py).
"""
from __future__ import annotations

import functools

# columns of KV cache allocated ahead of the rows; 0 keeps HF's DynamicCache (the benchmark compares the two)
KV_ROOM = 64


def with_room(cache):
    """``cache`` with each plain DynamicLayer (full attention; sliding-window layers are left as they are)
    replaced by one that holds its keys and values in a buffer with ``KV_ROOM`` free columns."""
    from transformers.cache_utils import DynamicLayer

    if KV_ROOM > 0:
        cache.layers = [roomy_layer_class().around(layer.keys, layer.values) if type(layer) is DynamicLayer else layer
                        for layer in cache.layers]
    return cache


@functools.lru_cache(maxsize=None)
def roomy_layer_class():
    from transformers.cache_utils import DynamicLayer

    class RoomyLayer(DynamicLayer):
        """A DynamicLayer whose ``keys``/``values`` are views of the first ``length`` columns of a larger buffer:
        an update writes the new columns in place (no copy of the cache) and only a full buffer is copied into
        a new one with ``KV_ROOM`` more columns. The attention reads the same values as with torch.cat."""

        @classmethod
        def around(cls, keys, values):
            layer = cls()
            layer.device, layer.is_initialized = keys.device, True
            layer.fill(keys, values)
            return layer

        def fill(self, keys, values, needed: int = 0):
            batch, heads, length, width = keys.shape
            room = max(KV_ROOM, needed)
            self.key_buffer = keys.new_empty((batch, heads, length + room, width))
            self.value_buffer = values.new_empty((batch, heads, length + room, values.shape[-1]))
            self.key_buffer[:, :, :length] = keys
            self.value_buffer[:, :, :length] = values
            self._expose(length)

        def _expose(self, length: int):
            self.length = length
            self.keys = self.key_buffer[:, :, :length]
            self.values = self.value_buffer[:, :, :length]

        def update(self, key_states, value_states, *args, **kwargs):
            new = key_states.shape[-2]
            if self.length + new > self.key_buffer.shape[-2]:
                self.fill(self.keys, self.values, new)
            self.key_buffer[:, :, self.length:self.length + new] = key_states
            self.value_buffer[:, :, self.length:self.length + new] = value_states
            self._expose(self.length + new)
            return self.keys, self.values

    return RoomyLayer


def join(cache, mask, new_cache, new_mask):
    """The running batch's cache and mask with a newly prefilled group appended (rows below), the shorter
    side left-padded with masked zeros so both have one length."""
    import torch

    if cache is None:
        return new_cache, new_mask
    width = max(mask.shape[1], new_mask.shape[1])
    for layer, new_layer in zip(cache.layers, new_cache.layers):
        room = KV_ROOM if _roomy(layer) else 0
        _hold(layer, _stacked((layer.keys, new_layer.keys), width, room),
              _stacked((layer.values, new_layer.values), width, room), width)
    return cache, torch.cat([_left_padded(mask, width), _left_padded(new_mask, width)])


def select(cache, mask, keep: list[int]):
    """Only the rows ``keep`` of the cache and mask, without the columns masked in every remaining row (left
    padding, drafts no row took): masked keys change no output, and cost a step its time."""
    import torch

    if not keep:
        return None, None
    rows = torch.tensor(keep, device=mask.device)
    mask = mask.index_select(0, rows)
    columns = mask.any(0)
    if not bool(columns.all()):
        mask = mask[:, columns]
    columns = columns.nonzero().squeeze(1)
    picks = {}      # the gather index by (heads, length, room): layers' keys and values share one, built once

    def gathered(tensor, room: int):
        heads, length = tensor.shape[1], tensor.shape[2]
        if (heads, length, room) not in picks:
            picks[heads, length, room] = _gather_index(heads, length, rows, columns, room)
        return _gathered(tensor, picks[heads, length, room], len(rows))

    for layer in cache.layers:
        room = KV_ROOM if _roomy(layer) else 0
        keys, values = (layer.key_buffer, layer.value_buffer) if room else (layer.keys, layer.values)
        _hold(layer, gathered(keys, room), gathered(values, room), len(columns))
    return cache, mask


def _roomy(layer) -> bool:
    return hasattr(layer, "key_buffer")


def _hold(layer, keys, values, length: int) -> None:
    """Give a cache layer new keys and values: for a roomy layer, buffers whose first ``length`` columns hold
    them (the rest is its room), else the keys and values themselves."""
    if _roomy(layer):
        layer.key_buffer, layer.value_buffer = keys, values
        layer._expose(length)
    else:
        layer.keys, layer.values = keys, values


def _left_padded(mask, width: int):
    """A 2-D attention mask left-padded with zeros (masked) to ``width`` columns."""
    import torch

    missing = width - mask.shape[1]
    return mask if missing == 0 else torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=1)


def _stacked(parts, width: int, room: int):
    """Keys (or values) of row groups, one below the other, each left-padded with zeros to ``width`` columns,
    written once into a new buffer with ``room`` free columns past them."""
    first = parts[0]
    buffer = first.new_empty((sum(part.shape[0] for part in parts), first.shape[1], width + room, first.shape[3]))
    top = 0
    for part in parts:
        bottom, pad = top + part.shape[0], width - part.shape[2]
        buffer[top:bottom, :, :pad].zero_()
        buffer[top:bottom, :, pad:width].copy_(part)
        top = bottom
    return buffer


def _gather_index(heads: int, length: int, rows, columns, room: int):
    """Which (row, head, column) vectors of a [batch, heads, length, width] cache tensor (or a roomy layer's
    buffer) make ``tensor[rows][:, :, columns]`` followed by ``room`` free columns, as positions among its
    batch x heads x length vectors: each vector is contiguous, so one index_select copies them all."""
    import torch

    columns = torch.cat([columns, columns.new_zeros(room)]) if room else columns   # room: filler, never read
    starts = (rows[:, None] * heads + torch.arange(heads, device=rows.device)[None, :]) * length
    return (starts[:, :, None] + columns[None, None, :]).reshape(-1)


def _gathered(tensor, picked, rows: int):
    """The vectors ``picked`` (``_gather_index``) of a cache tensor, in one copy into a new [rows, heads, columns
    and room, width] buffer."""
    heads, width = tensor.shape[1], tensor.shape[3]
    flat = tensor.contiguous().view(-1, width)     # buffers are contiguous: no copy
    return flat.index_select(0, picked).view(rows, heads, -1, width)
