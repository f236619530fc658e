"""The prompt of turn k of a research episode: the task, the earlier attempts and their feedback.

One form for every scaffold (:class:`wmrl.interfaces.Scaffold`)::

    <scaffold.prompt(task)>

    Attempt 1:
    ```python
    <scaffold.response_prefix + completion, its code block closed>
    ```
    Feedback on attempt 1:
    <Observation.render()>

    ...

    Write an improved solution in the same format as before. To submit your last attempt as final,
    repeat it unchanged.

For the grammar scaffold (empty response prefix) an attempt is the ``make_pipeline(...)`` expression in a
code block: previous pipeline, its feedback, then a new pipeline. The policy's own response prefix
still follows the prompt (it is forced by the policy, not written here).
"""
from __future__ import annotations

from collections.abc import Sequence

from wmrl.episodes.observation import Observation
from wmrl.interfaces import Scaffold
from wmrl.tasks.spec import Task

FENCE = "```"
#: The closing instruction of a prompt with history.
REVISE_INSTRUCTION = ("Write an improved solution in the same format as before. To submit your last attempt "
                      "as final, repeat it unchanged.")
#: The closing instruction for an agent with explicit validate / submit actions
#: (:class:`wmrl.episodes.env.ResearchEnv`).
ACTION_INSTRUCTION = ("Write an improved solution in the same format as before, and validate it, or submit the "
                      "solution you choose as final with the submit action.")


def show_attempt(scaffold: Scaffold, completion: str) -> str:
    """An earlier completion as the code the agent wrote: ``scaffold.response_prefix + completion``.

    When the prefix opens a code fence (script, function scaffolds) the completion is cut at its closing
    fence, if any, and the block is closed; otherwise (grammar) the text is put in a ```` ```python ````
    fence. Returns the fenced block, no trailing newline.
    """
    prefix = scaffold.response_prefix or ""
    if FENCE in prefix:
        end = completion.find(FENCE)
        body = completion if end < 0 else completion[:end]
        return (prefix + body).rstrip() + "\n" + FENCE
    return f"{FENCE}python\n{(prefix + completion).strip()}\n{FENCE}"


def episode_prompt(scaffold: Scaffold, task: Task, history: Sequence[tuple[str, Observation]],
                   instruction: str = REVISE_INSTRUCTION) -> str:
    """The prompt of the next turn: ``scaffold.prompt(task)``, then every earlier attempt and its feedback.

    Args:
        scaffold: the scaffold the completions were sampled under.
        task: the task (a validation view, so that the prompt describes the files the program sees).
        history: ``(completion, observation)`` pairs of the earlier turns, oldest first; the completion is
            the policy's text after ``scaffold.response_prefix``.
        instruction: the closing line (default :data:`REVISE_INSTRUCTION`: the trainer's agent submits by
            repeating its last attempt; :data:`ACTION_INSTRUCTION` for an agent with a submit action).

    Returns:
        Exactly ``scaffold.prompt(task)`` for an empty history; else that prompt, a blank line, the
        attempts (:func:`show_attempt`) each followed by ``Feedback on attempt k:`` and
        :meth:`~wmrl.episodes.observation.Observation.render`, and ``instruction``. The feedback
        holds only what a competitor sees (no test score, reward or medal).
    """
    base = scaffold.prompt(task)
    if not history:
        return base
    parts = [base, ""]
    for k, (completion, obs) in enumerate(history, start=1):
        parts += [f"Attempt {k}:", show_attempt(scaffold, completion), f"Feedback on attempt {k}:", obs.render(), ""]
    parts.append(instruction)
    return "\n".join(parts)
