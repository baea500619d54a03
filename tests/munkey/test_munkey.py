"""MUNKEY's parts on their own: the automatic patch, the conv stem's grid, the key memory's
delete. (The model fitted, forgetting, saved and loaded: benchmarks/tests/test_munkey_lab.py,
on the lab's digits.)"""

from __future__ import annotations

import pytest
import torch

from forgetting.munkey import KeyMemory, TinyViT, ViTConfig
from forgetting.munkey.backbone import conv_stem_sides
from forgetting.munkey.training import auto_patch


@pytest.mark.parametrize("side,patch", [(8, 2), (28, 7), (32, 8), (30, 6), (7, 1), (224, 56)])
def test_auto_patch_is_the_largest_divisor_giving_a_4x4_grid(side, patch):
    assert auto_patch(side) == patch and side % patch == 0 and side // patch >= min(side, 4)


@pytest.mark.parametrize(
    "side,patch,sides",
    [(28, 7, [14, 7, 4]), (28, 4, [14, 7]), (8, 2, [4]), (32, 8, [16, 8, 4]), (30, 5, [15, 8, 4])],
)
def test_conv_stem_halves_down_to_the_patch_grid(side, patch, sides):
    config = ViTConfig(image_size=side, patch=patch, stem="conv", width=16, heads=2)
    assert conv_stem_sides(side, patch) == sides and config.grid == sides[-1]
    net = TinyViT(config)
    tokens = net.patch_embed(torch.rand(2, 1, side, side))
    assert tokens.shape == (2, 16, sides[-1], sides[-1])
    assert net(torch.rand(2, 1, side, side)).shape == (2, 10)
    with pytest.raises(ValueError, match="stem must be one of"):
        ViTConfig(stem="resnet")


def test_key_memory_delete_is_swap_with_last():
    keys = torch.nn.functional.normalize(torch.arange(12.0).reshape(4, 3) + 1, dim=1)
    memory = KeyMemory(keys, torch.ones(4, 2), ["a", "b", "c", "d"])
    memory.delete("b")
    assert memory.ids == ["a", "d", "c"] and memory.position == {"a": 0, "d": 1, "c": 2}
    assert torch.equal(memory.keys[1], keys[3]) and not memory._keys[3].any()
    _, slots = memory.search(keys[1:2], 10)  # the deleted key itself as the query
    assert sorted(memory.ids[s] for s in slots[0].tolist()) == ["a", "c", "d"]
