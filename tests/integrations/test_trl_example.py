"""The TRL example of docs/integrations.md, run as written: 4 GRPO steps on CPU with the tiny backbone, a grammar
scaffold sampled by wmrl's constrained decoder under TRL, real sandboxed anchors with non-zero rewards, and a policy
that moves.

The example is the first ```python block after the heading "## TRL" of docs/integrations.md, read from the file, so
an edit of the docs that breaks it fails here."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    heading = re.search(r"^## TRL\b.*$", text, re.M)
    assert heading, "docs/integrations.md has no '## TRL' heading"
    m = re.compile(r"^```python\n(.*?)^```", re.S | re.M).search(text, heading.end())
    assert m, "docs/integrations.md has no ```python block after '## TRL'"
    return m.group(1)


@pytest.mark.slow
def test_documented_trl_example_trains_on_nonzero_rewards():
    pytest.importorskip("trl", reason="the TRL example needs the 'trl' extra (scripts/install.sh installs it)")
    import torch

    from wmrl.models.backbone import load_backbone

    code = _example()
    ns: dict = {"__name__": "trl_example"}
    exec(compile(code, "docs/integrations.md:python", "exec"), ns)  # noqa: S102 - the docs' example, as written
    start, _ = load_backbone(ns["MODEL"], device="cpu")  # the same seeded weights the example started from

    hist = ns["driver"].history
    assert [h.step for h in hist] == [1, 2, 3, 4]
    anchors = np.concatenate([h.inputs.reward_true[h.inputs.is_anchor] for h in hist])
    statuses = [s for h in hist for s in h.statuses if s is not None]
    assert anchors.size and statuses.count("ok") == len(statuses), statuses  # every anchor program ran
    assert np.count_nonzero(anchors) >= anchors.size / 2, anchors  # real, non-zero rewards
    used = np.concatenate([h.outputs.reward_used for h in hist])
    assert np.count_nonzero(used) == used.size
    before, after = start.state_dict(), ns["trainer"].model.state_dict()
    assert any(not torch.equal(before[k], after[k].detach()) for k in before), "the policy's weights did not change"
