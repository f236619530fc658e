"""``progress: false`` silences the progress bars of model loading and saving (transformers' tqdm) for the whole
run, and leaves them as they were afterwards."""
from __future__ import annotations

from tests.support.fakes import FakePolicy
from tests.training.test_loop_fakes import cfg_for, comps

from wmrl.training.run import run_training


class SavingPolicy(FakePolicy):
    """A fake policy whose checkpoint save shows transformers' progress bar, as ``save_pretrained`` does."""

    def save(self, d):
        from transformers.utils import logging as hf_logging

        for _ in hf_logging.tqdm(range(2), desc="Writing model shards"):
            pass
        return super().save(d)


def test_progress_false_prints_no_model_saving_bar(tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    cfg = cfg_for(tmp_path, "grpo", 2)
    c = comps("grpo")
    c.policy = SavingPolicy(0)
    assert run_training(cfg, components=c).status == "completed"
    err = capfd.readouterr().err
    assert "Writing model shards" not in err
    assert hf_logging.is_progress_bar_enabled()  # restored after the run
