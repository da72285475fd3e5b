"""The tlog-tiles coordinates (``audit.tiles``): the spec's one path per tile, and which tiles
a tree of a given size holds, checked against the spec's own examples."""

from __future__ import annotations

import pytest

from audit.tiles import ENTRIES, Tile, in_tree, parse_tile_path
from sitekit.errors import NotFoundError


@pytest.mark.parametrize(
    ("tile", "path"),
    [
        (Tile(0, 0), "tile/0/000"),
        (Tile(0, 1234067), "tile/0/x001/x234/067"),  # the spec's example
        (Tile(4, 1234067, 1), "tile/4/x001/x234/067.p/1"),
        (Tile(63, 999, 255), "tile/63/999.p/255"),
        (Tile(1, 1000), "tile/1/x001/000"),
        (Tile(ENTRIES, 2, 88), "tile/entries/002.p/88"),
        (Tile(ENTRIES, 10**15), "tile/entries/x001/x000/x000/x000/x000/000"),
    ],
)
def test_a_tile_has_one_path_and_it_parses_back(tile, path):
    """N in three-digit elements, all but the last with an x; .p/W for a partial tile only."""
    assert tile.path == path
    assert parse_tile_path(path) == tile


@pytest.mark.parametrize(
    "path", ["tile/0/x000/001", "tile/0/000.p/256", "tile/0/000.p/0", "tile/64/000", "tile/0/1", "tile/x/000"]
)
def test_another_spelling_is_not_found(path):
    """Only the spec's encoding names a tile: anything else is NotFoundError (404)."""
    with pytest.raises(NotFoundError):
        parse_tile_path(path)


def test_a_tree_of_70000_holds_the_tiles_the_spec_lists():
    """273 full level 0 tiles and a partial one of 112, a full level 1 tile and a partial one
    of 17, a partial level 2 tile of 1; the bundles follow the level 0 tiles."""
    size = 70_000
    assert in_tree(Tile(0, 272), size) and not in_tree(Tile(0, 273), size)
    assert in_tree(Tile(0, 273, 112), size) and not in_tree(Tile(0, 273, 113), size)
    assert in_tree(Tile(1, 0), size) and not in_tree(Tile(1, 1), size)
    assert in_tree(Tile(1, 1, 17), size) and not in_tree(Tile(1, 1, 18), size)
    assert in_tree(Tile(2, 0, 1), size) and not in_tree(Tile(2, 0, 2), size)
    assert not in_tree(Tile(3, 0, 1), size)
    assert in_tree(Tile(ENTRIES, 273, 112), size) and not in_tree(Tile(ENTRIES, 274, 1), size)


def test_a_tree_of_256_is_a_full_tile_and_a_partial_one_above():
    """The spec: "a tree of size 256 will be represented by a full level 0 tile and a partial
    level 1 tile of width 1"; nothing of an empty tree."""
    assert in_tree(Tile(0, 0), 256) and in_tree(Tile(1, 0, 1), 256)
    assert not in_tree(Tile(0, 1, 1), 256) and not in_tree(Tile(1, 0, 2), 256)
    assert not in_tree(Tile(0, 0, 1), 0) and not in_tree(Tile(ENTRIES, 0, 1), 0)
