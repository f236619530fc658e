"""Which part of a stale anchor stream costs reward against an exploitable world model? (docs/scaling.md)

    PYTHONPATH=. python studies/scaling/mechanism_probe.py [--seeds 24] [--d 2 10 20]

The contextual bandit of docs/simulation.md with the registered ``wmrl`` recipe and the exploitable world model
(B = 0.5, sigma = 0.1), every anchor group consumed exactly d steps after it was routed (no latency noise, so
that every step after the first d has exactly its 2 anchor groups, as the synchronous stream), 200 steps. Each
variant delays one thing and keeps the rest synchronous:

- ``async/update``: the trainer's earlier asynchronous stream (engine path: late groups in the
  gradient with the ratio <= 2, their pairs learned by the calibrator and the window at arrival; a step whose
  anchors are all in flight trains on its world-model groups alone);
- ``async/skip``: the same with ``steps_without_anchors: skip`` (the default now);
- ``stale gradient``: the anchor groups enter the loss d steps late (importance-corrected), but the calibrator
  and the window learn their pairs at routing (an oracle: the statistics are never stale);
- ``stale statistics``: the anchor groups are in their own step's loss with their true rewards, but the calibrator
  and the window learn their pairs d steps later;
- ``no anchor gradient in the first d steps``: synchronous, except that the first d steps have no anchors at all
  (the pipeline fill of an asynchronous stream, with nothing else stale).

dJ = final true reward minus the synchronous run of the same seed (mean, standard error over seeds).
"""
from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass

import numpy as np

import wmrl.sim.engine as E
from wmrl.sim.bandit import WorldModelSpec


@dataclass(frozen=True)
class ProbeSpec(E.RunSpec):
    probe: str = "sync"
    d: int = 0


class ProbeState(E._RunState):
    """A run whose anchor groups are consumed exactly ``d`` steps late in the way ``spec.probe`` says."""

    def step(self, t, arms, logp):
        sp = self.spec
        if sp.probe in ("sync", "async") or (sp.probe == "fill" and t >= sp.d):
            return super().step(t, arms, logp)
        C, G = arms.shape
        rows = np.arange(C)[:, None]
        r = self.problem.rewards[rows, arms]
        ex = self.problem.exploit[rows, arms]
        rh = E.world_model_scores(r, ex, sp.wm, self.rng_wm)
        rh2 = E.world_model_scores(r, ex, sp.wm, self.rng_wm)
        ag = self.router.route([f"task{c}" for c in range(C)], step=t)
        gid, arm, old = np.repeat(np.arange(C), G), arms.reshape(-1), np.full(C * G, np.nan)
        task = gid.copy()
        new = [dict(origin=t, task=int(c), arms=arms[c], r=r[c], r_hat=rh[c], r_hat2=rh2[c], logp=logp[c])
               for c in np.flatnonzero(ag)]
        self.pending += new
        due = [p for p in self.pending if t - p["origin"] == sp.d]
        self.pending = [p for p in self.pending if t - p["origin"] < sp.d]

        def cat(groups, key):
            return np.concatenate([p[key] for p in groups])

        def learn(groups):
            if groups:
                self.recipe.learn_late(self.state, t, np.repeat([p["origin"] for p in groups], G),
                                       np.repeat([p["task"] for p in groups], G), cat(groups, "r"),
                                       cat(groups, "r_hat"), cat(groups, "r_hat2"))

        def inputs(a, valid, rt, rw, rw2, gid_):
            return E.StepInputs(step=t, group_ids=gid_, is_anchor=a, valid=valid, reward_true=rt, reward_wm=rw,
                                reward_wm_repeat=rw2)

        if sp.probe == "stale_stats":  # the gradient now with the true rewards; the statistics d steps later
            a = np.repeat(ag, G)
            x = inputs(a, np.ones(C * G, bool), np.where(a, r.reshape(-1), np.nan), rh.reshape(-1),
                       rh2.reshape(-1), gid)
            out = self.recipe.step(x, copy.deepcopy(self.state), self.settings)
            learn(due)
        elif sp.probe == "fill":  # t < d: no anchors at all (routed groups out of the loss, never learned)
            x = inputs(np.zeros(C * G, bool), ~np.repeat(ag, G), np.full(C * G, np.nan), rh.reshape(-1),
                       rh2.reshape(-1), gid)
            out = self.recipe.step(x, self.state, self.settings)
            self.pending = []
        else:  # stale_grad: own groups out of the loss, due groups in it; the statistics learned at routing
            a, valid, rt = np.zeros(C * G, bool), ~np.repeat(ag, G), np.full(C * G, np.nan)
            rw, rw2 = rh.reshape(-1), rh2.reshape(-1)
            if due:
                n = len(due)
                task = np.concatenate([task, np.repeat([p["task"] for p in due], G)])
                arm, old = np.concatenate([arm, cat(due, "arms")]), np.concatenate([old, cat(due, "logp")])
                gid = np.concatenate([gid, np.repeat(C + np.arange(n), G)])
                a, valid = np.concatenate([a, np.ones(n * G, bool)]), np.concatenate([valid, np.ones(n * G, bool)])
                rt, rw, rw2 = (np.concatenate([rt, cat(due, "r")]), np.concatenate([rw, cat(due, "r_hat")]),
                               np.concatenate([rw2, cat(due, "r_hat2")]))
            out = self.recipe.step(inputs(a, valid, rt, rw, rw2, gid), copy.deepcopy(self.state), self.settings)
            learn(new)
        return dict(task=task, arm=arm, adv=out.advantages, weights=out.weights, old_logp=old, skip=False)


LABELS = {("async", "update"): "async, steps without anchors updated (before)",
          ("async", "skip"): "async, steps without anchors skipped (now)",
          ("stale_grad", "-"): "stale gradient only (statistics at routing)",
          ("stale_stats", "-"): "stale statistics only (gradient at its own step)",
          ("fill", "-"): "no anchor gradient in the first d steps only"}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=24)
    p.add_argument("--d", type=int, nargs="+", default=[2, 10, 20])
    a = p.parse_args(argv)
    E._RunState = ProbeState  # type: ignore[misc]  # the engine builds its runs' states from this name
    wm = WorldModelSpec("exploit", 0.5, 0.1)
    runs = []
    for s in range(a.seeds):
        runs.append(ProbeSpec("wmrl", wm, 0.1, s))
        for d in a.d:
            for sw in ("update", "skip"):
                runs.append(ProbeSpec("wmrl", wm, 0.1, s, staleness=d, late="gradient", latency_steps=1000.0,
                                      latency_sigma=0.0, at_bound="wait", steps_without_anchors=sw, probe="async", d=d))
            for pr in ("stale_grad", "stale_stats", "fill"):
                runs.append(ProbeSpec("wmrl", wm, 0.1, s, probe=pr, d=d))
    _, f = E.simulate(list[E.RunSpec](runs), E.SimConfig())
    f["probe"] = [r.probe for r in runs]
    f["d"] = [r.d for r in runs]
    f["variant"] = [(r.probe, r.steps_without_anchors if r.probe == "async" else "-") for r in runs]
    sync = f[f["probe"] == "sync"].set_index("seed")["J_final"]
    f["dJ"] = f["J_final"] - f["seed"].map(sync)
    print(f"{a.seeds} seeds, exploitable world model, 200 steps; synchronous J {sync.mean():.4f}; "
          f"{f.attrs['wall_s']:.0f} s\n")
    print("| variant | " + " | ".join(f"d = {d}" for d in a.d) + " |")
    print("|---|" + "---|" * len(a.d))
    for key, label in LABELS.items():
        cells = []
        for d in a.d:
            g = f[(f["variant"] == key) & (f["d"] == d)]["dJ"]
            cells.append(f"{g.mean():+.4f} ({g.std(ddof=1) / np.sqrt(len(g)):.4f})")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
