"""The trainer's exploitation alarm: the anchors of each step feed
:class:`wmrl.core.alarm.ExploitationMonitor`, and when it fires the configured response runs
(``wmrl.alarm.response``):

==================  ====================================================================================
``none``            no test
``warn``            a warning in train.log and on the console; the metrics say it fired
``raise_anchors``   warn, and double the router's anchor fraction, up to
                    ``wmrl.alarm.max_anchor_fraction`` (it stays raised; a checkpoint keeps it)
``refit``           warn, and refit the world model on the corpus and every anchor so far at once
``stop``            warn, write the step's checkpoint and stop with :class:`ExploitationStop`; the run
                    resumes from there (``wmrl train --resume``), with an edited config if wanted
==================  ====================================================================================

Only recipes with both streams (:attr:`wmrl.core.recipe.Recipe.fuses`) have anchors to test against a world
model. The anchors of a step are its own valid anchor samples with their out-of-sample calibrated scores
(the map of the step, fitted on earlier steps).
"""
from __future__ import annotations

import logging
from typing import Any
from collections.abc import Callable

import numpy as np

from wmrl.core.alarm import ExploitationMonitor, raised_anchor_fraction
from wmrl.runs.lifecycle import RunStopped

log = logging.getLogger(__name__)

__all__ = ["ExploitationStop", "ExploitationWatch"]


class ExploitationStop(RunStopped):
    """The exploitation alarm fired under ``wmrl.alarm.response: stop``; the run's last checkpoint is the
    alarm's step, and ``wmrl train --resume RUN_DIR`` continues from it (a :class:`~wmrl.runs.rundir.RunDirError`)."""


class ExploitationWatch:
    """The monitor of one run and its response (module docstring).

    Args:
        response: ``wmrl.alarm.response``. threshold, drift: h and k of the CUSUM tests.
        max_anchor_fraction: the ceiling of ``raise_anchors``.
        active: whether the run's recipe has both streams (otherwise :meth:`observe` returns ``{}``).
    """

    def __init__(self, response: str, threshold: float, drift: float, max_anchor_fraction: float, active: bool):
        self.response = response
        self.active = active and response != "none"
        self.max_anchor_fraction = max_anchor_fraction
        self.monitor = ExploitationMonitor(threshold=threshold, drift=drift)
        #: set by a ``stop`` response: the message :class:`ExploitationStop` carries
        self.stop_message: str | None = None

    def observe(self, step: int, group_ids: np.ndarray, reward_true: np.ndarray, reward_wm_calibrated: np.ndarray,
                reward_wm: np.ndarray, router: Any, refit: Callable[[int], Any] | None,
                log_line: Callable[[str], None]) -> dict[str, Any]:
        """Test one step's N valid anchor samples ([N] arrays as :meth:`ExploitationMonitor.update`) and respond.

        Returns:
            The step's metrics: ``exploit_alarm`` (bool), ``exploit_alarm_reason``, ``exploit_residual_cusum``,
            ``exploit_order_cusum``, ``exploit_alarms_total``, ``anchor_fraction`` (the router's, after any
            response); ``{}`` for a run without both streams or with the alarm set to ``none``.
        """
        if not self.active:
            return {}
        if np.size(group_ids):
            check = self.monitor.update(step, group_ids, reward_true, reward_wm_calibrated, reward_wm)
        else:
            check = None
        fired = check is not None and check.fired
        if fired:
            self._respond(step, check, router, refit, log_line)
        return {"exploit_alarm": fired, "exploit_alarm_reason": check.reason if check is not None and fired else None,
                "exploit_residual_cusum": self.monitor.residual_cusum, "exploit_order_cusum": self.monitor.order_cusum,
                "exploit_alarms_total": self.monitor.n_alarms, "anchor_fraction": float(router.fraction)}

    def _respond(self, step: int, check: Any, router: Any, refit: Callable[[int], Any] | None,
                 log_line: Callable[[str], None]) -> None:
        what = {"residual": "the anchors score below their calibrated predictions",
                "order": "the world model orders the anchor groups worse than chance",
                "residual+order": "the anchors score below their calibrated predictions and the world model orders "
                                  "them worse than chance"}[check.reason]
        action = "no action (wmrl.alarm.response: warn)"
        if self.response == "raise_anchors":
            old = float(router.fraction)
            router.fraction = raised_anchor_fraction(old, self.max_anchor_fraction)
            action = f"anchor fraction {old:g} -> {router.fraction:g}"
        elif self.response == "refit":
            if refit is not None:
                refit(step)
            action = ("world model refitted on every anchor so far" if refit is not None else
                      "no refit: this run's components have no refit")
        elif self.response == "stop":
            action = "training stops at this step's checkpoint"
        msg = (f"exploitation alarm at step {step}: {what} (residual CUSUM {check.residual_cusum:.1f}, order CUSUM "
               f"{check.order_cusum:.1f}, threshold {self.monitor.threshold:g}; mean residual r - f_hat(r_hat) "
               f"{check.mean_residual:+.3f}): the policy may be moving onto programs the world model over-rates; "
               f"{action}")
        log.warning(msg)
        log_line(f"WARNING {msg}")
        if self.response == "stop":
            self.stop_message = (f"{msg}. Inspect the run (wmrl report RUN_DIR), then continue it with `wmrl train "
                                 f"--resume RUN_DIR` (add --set wmrl.alarm.response=warn to go on without stopping)")

    def state_dict(self) -> dict[str, Any]:
        """The monitor's state (JSON-able), for the checkpoint."""
        return self.monitor.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict`; ``None`` (a checkpoint from before the alarm) keeps a fresh monitor. The
        configured threshold and drift win over the saved ones (an edited config on resume)."""
        if state:
            h, k = self.monitor.threshold, self.monitor.drift
            self.monitor.load_state_dict(state)
            self.monitor.threshold, self.monitor.drift = h, k
