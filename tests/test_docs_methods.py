"""The one table of the methods (docs/training.md, "Methods") lists exactly the registered recipes, in order."""
from __future__ import annotations

import re
from pathlib import Path

from wmrl.core.recipe import get_recipe, recipe_names

TRAINING_MD = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def _methods_table() -> list[list[str]]:
    text = TRAINING_MD.read_text(encoding="utf-8")
    section = re.search(r"^## Methods\n(.*?)^## ", text, re.S | re.M)
    assert section, "docs/training.md has no '## Methods' section"
    lines = section.group(1).splitlines()
    header = next((k for k, line in enumerate(lines) if line.startswith("| `method` |")), None)
    assert header is not None, "the Methods section has no table with a `method` column"
    rows = [line for line in lines[header + 2:] if line.startswith("| `")]  # after the header and |---|
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_methods_table_lists_every_registered_recipe_in_order():
    names = [row[0].strip("`") for row in _methods_table()]
    assert names == recipe_names()


def test_methods_table_says_which_groups_each_recipe_executes():
    expected = {"all": "all", "none": "none", "fraction": "rho"}
    for row in _methods_table():
        recipe = get_recipe(row[0].strip("`"))
        assert row[1] == expected[recipe.anchors], (recipe.name, row[1])
        recall = row[3]
        if recipe.uses_world_model:
            assert recall == ("yes" if recipe.recall else "no"), (recipe.name, recall)
