"""wmrl.episodes: multi-turn research episodes (docs/multiturn.md).

An agent writes a program, sees what running it says and revises it. This package holds what a turn
shows the agent: :class:`~wmrl.episodes.observation.Observation` (a validation score on a harness-made
split, the run time, the tail of an error; from a real execution or from the world model, rendered
alike) and :func:`~wmrl.episodes.prompt.episode_prompt` (a scaffold's prompt followed by the earlier
attempts and their feedback). The feedback never carries test-set information: see
:func:`wmrl.tasks.validation.validation_view` and :func:`~wmrl.episodes.observation.observation_from_result`.
:class:`~wmrl.episodes.env.ResearchEnv` is the same episode as a Gymnasium environment for users' own agents
(docs/multiturn-env.md; imported on first use).
"""
from __future__ import annotations

from wmrl.episodes.observation import (
    DEFAULT_ERROR_CHARS,
    PREDICTED_ERROR_TAIL,
    Observation,
    observation_from_prediction,
    observation_from_result,
)
from wmrl.episodes.prompt import episode_prompt, show_attempt

__all__ = ["DEFAULT_ERROR_CHARS", "PREDICTED_ERROR_TAIL", "Observation", "ResearchEnv", "episode_prompt",
           "observation_from_prediction", "observation_from_result", "show_attempt"]


def __getattr__(name: str):
    if name == "ResearchEnv":  # lazily: it imports gymnasium and registers the env id
        from wmrl.episodes.env import ResearchEnv  # noqa: PLC0415 - heavy: loads gymnasium

        return ResearchEnv
    raise AttributeError(f"module 'wmrl.episodes' has no attribute {name!r}")
