"""wmrl.world_model: the world model, an LM with the agent's backbone that predicts a program's reward
without running it, and the warm-up corpus it is first fitted on.

Modules: :mod:`~wmrl.world_model.base` (``BackboneWorldModel``: the adapter on the shared backbone, encoding,
the shared-prompt pass, persistence), :mod:`~wmrl.world_model.data` (records to examples, the split by
group, the fit's metrics), :mod:`~wmrl.world_model.regression` (``RegressionWorldModel``: a ridge reward
head on the backbone's features, optionally with a LoRA adapter), :mod:`~wmrl.world_model.generative`
(``GenerativeWorldModel``: the WMRL paper's judge, the same backbone writing the outcome),
:mod:`~wmrl.world_model.outcome`
(``OutcomePrediction``, the gate, the reward ladders), :mod:`~wmrl.world_model.factory`
(build or load one from a config), :mod:`~wmrl.world_model.metrics` (pairwise accuracy, Spearman, calibration
on anchors), :mod:`~wmrl.world_model.fidelity` (the fidelity card: outcome-class accuracy, failure AUC, reward
calibration and ranking on real executions, with cluster-bootstrap intervals), :mod:`~wmrl.world_model.cli`
(``wmrl wm``). The warm-up corpus it is fitted on is :mod:`wmrl.models.corpus`. Depends on ``models`` (backbones,
adapters), ``execution`` and ``tasks``; nothing below imports it.
"""
