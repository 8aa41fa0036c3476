"""The running batch's KV cache: buffers with room to grow in place, rows joining and leaving.

A decode step writes its column into room allocated ahead (``KV_ROOM`` columns) instead of copying the whole
cache (DynamicCache's torch.cat, ~9% of a step at batch 16 with 150 tokens cached). Rows that join are
appended below with the shorter side left-padded by masked zeros; rows that leave are dropped with every column
masked in all the rows that stay (left padding, refused drafts), since masked keys change no output and cost a
step its time.
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

    def widen(tensor, dim):   # left-pad along ``dim`` to ``width``
        missing = width - tensor.shape[dim]
        if missing == 0:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = missing
        return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)

    for layer, new_layer in zip(cache.layers, new_cache.layers):
        replace(layer, torch.cat([widen(layer.keys, 2), widen(new_layer.keys, 2)]),
                torch.cat([widen(layer.values, 2), widen(new_layer.values, 2)]))
    return cache, torch.cat([widen(mask, 1), widen(new_mask, 1)])


def replace(layer, keys, values) -> None:
    """Give a cache layer new keys and values (into a fresh buffer with room, for a roomy layer)."""
    if hasattr(layer, "key_buffer"):
        layer.fill(keys, values)
    else:
        layer.keys, layer.values = keys, values


def select(cache, mask, keep: list[int]):
    """Only the rows ``keep`` of the cache and mask, without the columns masked in every remaining row (left
    padding, drafts no row took): masked keys change no output, and cost a step its time."""
    import torch

    if not keep:
        return None, None
    index = torch.tensor(keep, device=mask.device)
    mask = mask.index_select(0, index)
    columns = mask.any(0)
    if bool(columns.all()):
        for layer in cache.layers:
            replace(layer, layer.keys.index_select(0, index), layer.values.index_select(0, index))
        return cache, mask
    columns = columns.nonzero().squeeze(1)
    for layer in cache.layers:
        replace(layer, layer.keys.index_select(0, index).index_select(2, columns),
                layer.values.index_select(0, index).index_select(2, columns))
    return cache, mask.index_select(1, columns)
