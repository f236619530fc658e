"""Scaffolds: how a policy completion becomes a runnable solution program for a task.

Six scaffolds (the :class:`wmrl.interfaces.Scaffold` protocol, plus a few optional attributes the
policy reads):

* ``script``: the model writes a whole Python program (data loading, features, model, submission).
  Only capable models manage this; the small default model mostly writes broken scripts.
* ``function``: a fixed harness (:func:`wmrl.tasks.harness.render_solution`) loads the data,
  encodes and imputes features and writes the submission; the model writes the body of
  ``def build_model():`` returning a scikit-learn estimator or pipeline. Generation stops at the
  end of the function (the first non-indented line) or at a closing code fence.
* ``grammar``: constrained decoding over a small finite grammar of preprocessing steps, model
  families and discrete hyperparameters, in the tokenizer's canonical tokenization of each sentence.
  The completion is one ``make_pipeline(...)`` expression, rendered into ``build_model()`` and the
  same harness, so every sample that finishes the grammar is a valid program. The choices change
  both the score and the execution cost (``n_estimators``, ``max_iter``, depth, neighbours...).
* ``grammar-fail``: the same decoding over :mod:`wmrl.models.fail_grammar`, whose choices can fail
  for the reasons agents' programs fail (a solver that refuses a penalty, ``PCA`` wider than the table,
  ``log1p`` of negative features, polynomial features too big for memory or time, decision scores
  written as probabilities), mostly only on some tasks: the programs have statuses to predict.
* ``grammar-fine``: the same decoding over :mod:`wmrl.models.fine_grammar`, the ``grammar`` scaffold's
  pipelines with every numeric hyperparameter on a fine grid (about 46,000 sentences per task kind), so
  that a policy settled on a model family still writes new programs while it explores.
* ``grammar-dense``: the same decoding over :mod:`wmrl.models.dense_grammar`, every numeric hyperparameter
  dense (every integer of its range, three decimals, two significant digits; about 1.6e8 sentences per task
  kind, decoded without listing them), so that exact repeats are rare within most model families.

Optional scaffold attributes used by :class:`wmrl.models.policy.Policy`:
``response_prefix`` (text forced at the start of the assistant turn, part of the prompt tokens),
``stop_at(text) -> int | None`` (character index where a completion ends, or None),
``grammar_key(task) -> str | None`` and ``grammar_sentences(key) -> Sequence[str]`` (constrained
decoding over a finite set of sentences, a tuple or a :class:`~wmrl.models.grammar_lang.Language`),
``default_max_new_tokens`` and ``is_valid(task, completion) -> bool``.
"""
from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from wmrl.core.registry import Registry
from wmrl.interfaces import Scaffold
from wmrl.models.fail_grammar import EXTRA_IMPORTS, fail_grammar_sentences
from wmrl.models.dense_grammar import dense_grammar_language
from wmrl.models.fine_grammar import fine_grammar_sentences
from wmrl.models.grammar_lang import PREPROCESSING, Language, call, expand, hp
from wmrl.tasks.harness import render_solution
from wmrl.tasks.metrics import prediction_kind
from wmrl.tasks.spec import Task


#: Chosen from the measured valid-program rate (``wmrl scaffolds``; numbers in docs/models.md):
#: with SmolLM2-135M on the built-in train tasks only the grammar scaffold yields mostly valid
#: programs, so it is the default.
DEFAULT_SCAFFOLD: str = "grammar"

_MAX_DESCRIPTION_CHARS = 240
_MAX_SCHEMA_COLUMNS = 12


# --------------------------------------------------------------------------------------------
# Prompt pieces
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _schema_cached(train_path: str, target: str, id_column: str, mtime: float) -> str:
    import pandas as pd  # noqa: PLC0415 - heavy (pandas)

    df = pd.read_csv(train_path, nrows=500)
    feats = [c for c in df.columns if c not in (target, id_column)]
    parts = []
    for c in feats[:_MAX_SCHEMA_COLUMNS]:
        s = df[c]
        if pd.api.types.is_bool_dtype(s) or not pd.api.types.is_numeric_dtype(s):
            parts.append(f"{c}(cat{s.nunique()})")
        else:
            parts.append(f"{c}(num)")
    more = f" +{len(feats) - _MAX_SCHEMA_COLUMNS} more" if len(feats) > _MAX_SCHEMA_COLUMNS else ""
    return ", ".join(parts) + more


def data_schema(task: Task) -> str:
    """A compact one-line schema of ``train.csv`` features: ``name(num)`` / ``name(catK)``.

    At most 12 columns are listed (``+N more`` for the rest); the target and id columns are left
    out. Read from the first 500 rows; cached per file. Returns ``""`` when the file is missing.
    """
    p = Path(task.public_dir) / "train.csv"
    if not p.is_file():
        return ""
    return _schema_cached(str(p), task.target, task.id_column, p.stat().st_mtime)


def _short_description(task: Task) -> str:
    text = re.sub(r"^\s*#[^\n]*\n", "", task.description or "", count=1)  # the title heading
    text = re.sub(r"[#*`>|]+", " ", text)
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > _MAX_DESCRIPTION_CHARS:
        cut = text[:_MAX_DESCRIPTION_CHARS]
        text = cut[: cut.rfind(" ")] + " ..." if " " in cut else cut
    return text


def task_header(task: Task) -> str:
    """The task part shared by every scaffold's prompt (about 100-150 tokens).

    Title/description (first 240 characters), task type, metric and direction, target, rows and the
    compact data schema of :func:`data_schema`.
    """
    direction = "lower is better" if task.lower_is_better else "higher is better"
    classes = ""
    if task.type != "regression" and task.classes:
        shown = ", ".join(str(c) for c in task.classes[:6]) + (" ..." if len(task.classes) > 6 else "")
        classes = f" Classes: {shown}."
    n_train = getattr(task, "n_train", 0) or task.n_rows
    lines = [
        f"Task: {getattr(task, 'title', '') or task.id}. {_short_description(task)}",
        f"Type: {task.type}, metric: {task.metric} ({direction}). Target: {task.target}.{classes}"
        + (f" Rows: {n_train}." if n_train else ""),
    ]
    schema = data_schema(task)
    if schema:
        lines.append(f"Features: {schema}")
    return "\n".join(lines)


def _estimator_kind(task: Task) -> str:
    return "regressor" if task.type == "regression" else "classifier"


# --------------------------------------------------------------------------------------------
# script
# --------------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: str) -> str:
    """The Python code of a completion: the first fenced code block if any, else the whole text."""
    m = _FENCE_RE.search(completion)
    return m.group(1) if m else completion


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


class _FreeFormScaffold:
    """What the free-form scaffolds share: no grammar (the policy samples from the whole vocabulary)."""

    def grammar_key(self, task: Task) -> str | None:
        """None: free-form text, no constrained decoding."""
        return None

    def grammar_sentences(self, key: str) -> tuple[str, ...]:
        """Never called (:meth:`grammar_key` is None). Raises ValueError."""
        raise ValueError(f"scaffold {self.name!r} has no grammar")  # type: ignore[attr-defined]


class ScriptScaffold(_FreeFormScaffold):
    """The model writes a whole program; the completion's code block is the program."""

    name = "script"
    response_prefix = "```python\nimport pandas as pd\n"
    default_max_new_tokens = 384

    def prompt(self, task: Task) -> str:
        """Task header plus the I/O contract (files, submission columns); about 200 tokens."""
        if task.type == "regression":
            sub = f"columns {task.id_column},{task.target} (predicted value)"
        elif task.type == "binary":
            positive = task.classes[-1] if task.classes else 1
            sub = f"columns {task.id_column},{task.target} (probability of class {positive})"
        else:
            sub = f"column {task.id_column} then one probability column per class"

        if prediction_kind(task.type, task.metric) == "label":
            sub = f"columns {task.id_column},{task.target} (predicted label)"
        return (
            f"{task_header(task)}\n"
            f"Write a complete Python script using pandas and scikit-learn. Read input/train.csv "
            f"and input/test.csv (id column {task.id_column}), handle missing values and "
            f"categorical columns, fit a {_estimator_kind(task)} and write submission.csv with "
            f"{sub}. Reply with one code block."
        )

    def stop_at(self, text: str) -> int | None:
        """Index just after the closing code fence, or None while the block is open."""
        i = text.find("```")
        return None if i < 0 else i

    def render(self, task: Task, completion: str) -> str:
        """``response_prefix`` + the completion's code up to its closing fence; never raises."""
        body = completion.split("```", 1)[0]
        return self.response_prefix.split("\n", 1)[1] + body

    def is_valid(self, task: Task, completion: str) -> bool:
        """True when the rendered program parses as Python (it may still fail when run)."""
        return _parses(self.render(task, completion))


# --------------------------------------------------------------------------------------------
# function
# --------------------------------------------------------------------------------------------

_FUNCTION_EXAMPLE = {
    "classifier": "    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500))",
    "regressor": "    return make_pipeline(StandardScaler(), Ridge(alpha=1.0))",
}


class FunctionScaffold(_FreeFormScaffold):
    """The model writes the body of ``build_model()``; the harness does everything else."""

    name = "function"
    # The body's first indentation is forced: the model starts writing the first statement.
    response_prefix = "```python\ndef build_model():\n    "
    default_max_new_tokens = 96

    def prompt(self, task: Task) -> str:
        """Task header, the harness contract and a one-line example body; about 200 tokens."""
        kind = _estimator_kind(task)
        return (
            f"{task_header(task)}\n"
            f"Features are already imputed and one-hot encoded (numeric matrix). Write "
            f"build_model() returning an unfitted scikit-learn {kind} or pipeline; scikit-learn "
            f"classes, make_pipeline and np are imported. Try a strong model. Example:\n"
            f"def build_model():\n{_FUNCTION_EXAMPLE[kind]}"
        )

    def stop_at(self, text: str) -> int | None:
        """Index where the function ends: a closing fence or the first non-indented line."""
        cuts = [i for i in (text.find("```"),) if i >= 0]
        m = re.search(r"\n(?=[^\s])", text)
        if m:
            cuts.append(m.start())
        return min(cuts) if cuts else None

    def function_source(self, completion: str) -> str:
        """``def build_model():`` + the forced indentation + the completion cut at :meth:`stop_at`."""
        end = self.stop_at(completion)
        body = completion if end is None else completion[:end]
        # Tokens with a leading space (" return") after the forced indentation would indent the
        # first statement by 5 columns; the first line's extra blanks are dropped.
        return "def build_model():\n    " + body.lstrip(" \t").rstrip() + "\n"

    def render(self, task: Task, completion: str) -> str:
        """The harness program around :meth:`function_source`; never raises."""
        return render_solution(task, self.function_source(completion))

    def is_valid(self, task: Task, completion: str) -> bool:
        """True when ``build_model`` parses and its body contains a ``return`` statement."""
        src = self.function_source(completion)
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            return False
        fn = tree.body[0] if tree.body else None
        return isinstance(fn, ast.FunctionDef) and any(isinstance(n, ast.Return) for n in ast.walk(fn))


# --------------------------------------------------------------------------------------------
# grammar
# --------------------------------------------------------------------------------------------


# The grammar is a finite language, written as nested Python values (:mod:`wmrl.models.grammar_lang`:
# a ``str`` is literal text, a ``tuple`` a sequence, a ``list`` a choice). :func:`grammar_sentences`
# expands it; the policy decodes the canonical tokenization of each sentence
# (:mod:`wmrl.models.choice_trie`), so only the choices carry log-probability.
_TREES = {
    "n_estimators": ("10", "50", "200", "400"),
    "max_depth": ("3", "8", "16", "None"),
    "min_samples_leaf": ("1", "5", "20"),
}


def _tree_ensemble(cls: str) -> tuple:
    return call(cls, *(hp(k, v) for k, v in _TREES.items()))


def _hgb(cls: str) -> tuple:
    return call(cls, hp("max_iter", ("20", "100", "300")), hp("learning_rate", ("0.03", "0.1", "0.3")),
                 hp("max_leaf_nodes", ("7", "31", "63")))


def _gb(cls: str) -> tuple:
    return call(cls, hp("n_estimators", ("30", "100", "300")), hp("learning_rate", ("0.05", "0.1", "0.3")),
                 hp("max_depth", ("2", "3", "5")))


def _knn(cls: str) -> tuple:
    return call(cls, hp("n_neighbors", ("1", "5", "15", "50")), hp("weights", ("'uniform'", "'distance'")))


def _tree(cls: str) -> tuple:
    return call(cls, hp("max_depth", ("2", "4", "8", "None")), hp("min_samples_leaf", ("1", "5", "20")))


_MODELS: dict[str, list] = {
    "classifier": [
        call("LogisticRegression", hp("C", ("0.01", "0.1", "1.0", "10.0")), hp("max_iter", ("100", "1000"))),
        _tree_ensemble("RandomForestClassifier"),
        _tree_ensemble("ExtraTreesClassifier"),
        _hgb("HistGradientBoostingClassifier"),
        _gb("GradientBoostingClassifier"),
        _knn("KNeighborsClassifier"),
        _tree("DecisionTreeClassifier"),
        "GaussianNB()",
    ],
    "regressor": [
        call("Ridge", hp("alpha", ("0.1", "1.0", "10.0", "100.0"))),
        call("Lasso", hp("alpha", ("0.001", "0.01", "0.1", "1.0")), hp("max_iter", ("1000", "5000"))),
        _tree_ensemble("RandomForestRegressor"),
        _tree_ensemble("ExtraTreesRegressor"),
        _hgb("HistGradientBoostingRegressor"),
        _gb("GradientBoostingRegressor"),
        _knn("KNeighborsRegressor"),
        _tree("DecisionTreeRegressor"),
    ],
}



def grammar(kind: str) -> tuple:
    """The grammar of ``make_pipeline(...)`` expressions for one task kind, as nested values.

    An optional scaler (standard, min-max, robust, quantile), an optional PCA after it (0.8/0.95/0.99
    of the variance), then one of 8 model families with discrete hyperparameters.

    Raises:
        KeyError: an unknown ``kind`` (``"classifier"`` or ``"regressor"``).
    """
    return ("make_pipeline(", PREPROCESSING, _MODELS[kind], ")")


@functools.lru_cache(maxsize=8)
def grammar_sentences(kind: str) -> tuple[str, ...]:
    """Every sentence of :func:`grammar` for ``kind``, in the grammar's order (no duplicates).

    Returns:
        3,043 classifier or 3,094 regressor pipelines (17 preprocessing choices x 179 or 182 models).

    Raises:
        KeyError: an unknown ``kind``.
    """
    return tuple(dict.fromkeys(expand(grammar(kind))))


@functools.lru_cache(maxsize=8)
def _sentence_set(kind: str) -> frozenset[str]:
    return frozenset(grammar_sentences(kind))


_GRAMMAR_RENDER = """\
def build_model():
    model = {expr}
    seeds = {{k: 0 for k in model.get_params() if k.endswith("random_state")}}
    return model.set_params(**seeds)
"""


class GrammarScaffold:
    """Constrained decoding of one ``make_pipeline(...)`` expression; every finished sample is valid.

    The policy decodes the tokenizer's own (canonical) tokenization of the chosen sentence: text the
    grammar fixes is forced (one allowed token, log-probability 0), so the gradient moves only the
    real choices (preprocessing, model family, hyperparameters).
    """

    name = "grammar"
    response_prefix = ""
    # The longest sentence is 63 (classifier) or 64 (regressor) SmolLM2 tokens with EOS, 44-45 on average;
    # the policy and the trainer refuse a smaller budget. Generation stops at EOS, so slack costs nothing.
    default_max_new_tokens = 96

    def prompt(self, task: Task) -> str:
        """Task header plus the instruction to pick a pipeline; about 150 tokens."""
        return (
            f"{task_header(task)}\n"
            f"Choose a scikit-learn pipeline ({_estimator_kind(task)}) for this task: optional "
            f"scaler and PCA, then a model with its hyperparameters. Reply with one make_pipeline(...) "
            f"expression."
        )

    def grammar_key(self, task: Task) -> str:
        """``"classifier"`` or ``"regressor"``: which grammar constrains this task's samples."""
        return _estimator_kind(task)

    def grammar_sentences(self, key: str) -> Sequence[str]:
        """The sentences of :func:`grammar_sentences` for ``key``."""
        return grammar_sentences(key)

    def stop_at(self, text: str) -> int | None:
        """Grammar completions end at EOS; nothing to cut."""
        return None

    def function_source(self, completion: str) -> str:
        """``build_model()`` returning the expression, with every ``random_state`` set to 0."""
        expr = completion.strip() or "None"
        return _GRAMMAR_RENDER.format(expr=expr)

    def render(self, task: Task, completion: str) -> str:
        """The harness program around :meth:`function_source`; never raises."""
        return render_solution(task, self.function_source(completion))

    def is_valid(self, task: Task, completion: str) -> bool:
        """True when ``completion`` is a complete sentence of this task's grammar."""
        return completion.strip() in _sentence_set(self.grammar_key(task))


class FailGrammarScaffold(GrammarScaffold):
    """Constrained decoding like :class:`GrammarScaffold`, over :func:`wmrl.models.fail_grammar.fail_grammar`:
    pipelines that can fail for the reasons agents' programs fail (a parameter the solver refuses, a
    transform that breaks on some tables, a model too slow or too big for the task, scores that are not
    probabilities), so a world model has statuses to predict.

    Programs render with the harness's ``output="as_is"`` (predictions written as the estimator gives
    them); the statuses come from the real execution and the grader, nothing is special-cased.
    """

    name = "grammar-fail"
    # The longest sentence is 54 (classifier) or 56 (regressor) SmolLM2 tokens with EOS, 40-42 on average.
    default_max_new_tokens = 96

    def prompt(self, task: Task) -> str:
        """Task header plus the instruction to pick a pipeline; about 150 tokens."""
        return (
            f"{task_header(task)}\n"
            f"Choose a scikit-learn pipeline ({_estimator_kind(task)}) for this task: optional scaler, "
            f"optional feature step (PCA, log1p, polynomial features), then a model with its "
            f"hyperparameters. Reply with one make_pipeline(...) expression."
        )

    def grammar_sentences(self, key: str) -> tuple[str, ...]:
        """The sentences of :func:`wmrl.models.fail_grammar.fail_grammar_sentences` for ``key``."""
        return fail_grammar_sentences(key)

    def function_source(self, completion: str) -> str:
        """The grammar's ``build_model()`` (every ``random_state`` set to 0) after the imports it needs
        beyond the harness's (:data:`wmrl.models.fail_grammar.EXTRA_IMPORTS`)."""
        return "\n".join(EXTRA_IMPORTS) + "\n\n\n" + super().function_source(completion)

    def render(self, task: Task, completion: str) -> str:
        """The harness program around :meth:`function_source`, predictions written as-is; never raises."""
        return render_solution(task, self.function_source(completion), output="as_is")

    def is_valid(self, task: Task, completion: str) -> bool:
        """True when ``completion`` is a complete sentence of this task's grammar (it may fail when run)."""
        return completion.strip() in _fail_sentence_set(self.grammar_key(task))


@functools.lru_cache(maxsize=8)
def _fail_sentence_set(kind: str) -> frozenset[str]:
    return frozenset(fail_grammar_sentences(kind))


class FineGrammarScaffold(GrammarScaffold):
    """Constrained decoding like :class:`GrammarScaffold`, over :func:`wmrl.models.fine_grammar.fine_grammar`:
    the same pipelines with fine-grained numeric hyperparameters, decoded digit by digit, so that exact
    repeats of a program are rare even once the policy has settled on a model family (every sentence is a
    valid program, rendered like the ``grammar`` scaffold's).
    """

    name = "grammar-fine"
    # The longest sentence is 63 (classifier) or 64 (regressor) SmolLM2 tokens with EOS; the choice trie of one
    # kind has about 175,000 nodes and takes 5-20 s to build (once per process and kind).
    default_max_new_tokens = 96

    def grammar_sentences(self, key: str) -> tuple[str, ...]:
        """The sentences of :func:`wmrl.models.fine_grammar.fine_grammar_sentences` for ``key``."""
        return fine_grammar_sentences(key)

    def is_valid(self, task: Task, completion: str) -> bool:
        """True when ``completion`` is a complete sentence of this task's grammar."""
        return completion.strip() in _fine_sentence_set(self.grammar_key(task))


@functools.lru_cache(maxsize=8)
def _fine_sentence_set(kind: str) -> frozenset[str]:
    return frozenset(fine_grammar_sentences(kind))


class DenseGrammarScaffold(GrammarScaffold):
    """Constrained decoding like :class:`GrammarScaffold`, over :func:`wmrl.models.dense_grammar.dense_grammar`:
    the same pipelines with dense numeric hyperparameters (about 1.6e8 sentences per task kind, a
    :class:`~wmrl.models.grammar_lang.Language` that is never listed), decoded digit by digit, so that exact
    repeats are rare within most model families; rendered like the ``grammar`` scaffold's programs.
    """

    name = "grammar-dense"
    # The longest sentence is 64 (classifier) or 65 (regressor) SmolLM2 tokens with EOS; the choice graph of one
    # kind has about 60,000 nodes and takes 3-10 s to build (mostly the tokenizer check; once per process and kind).
    default_max_new_tokens = 96

    def grammar_sentences(self, key: str) -> Language:
        """The sentences of :func:`wmrl.models.dense_grammar.dense_grammar_language` for ``key``."""
        return dense_grammar_language(key)

    def is_valid(self, task: Task, completion: str) -> bool:
        """True when ``completion`` is a complete sentence of this task's grammar."""
        return completion.strip() in dense_grammar_language(self.grammar_key(task))


#: The scaffold registry: name -> a factory of a fresh :class:`~wmrl.interfaces.Scaffold` (entry-point group
#: ``wmrl.scaffolds``; an entry point names a scaffold class or another factory without arguments).
SCAFFOLDS: Registry[Callable[[], Scaffold]] = Registry("scaffold", group="wmrl.scaffolds")
for _name, _cls in (("script", ScriptScaffold), ("function", FunctionScaffold), ("grammar", GrammarScaffold),
                    ("grammar-fail", FailGrammarScaffold), ("grammar-fine", FineGrammarScaffold),
                    ("grammar-dense", DenseGrammarScaffold)):
    SCAFFOLDS.register(_name, _cls)


def get_scaffold(name: str) -> Scaffold:
    """A fresh scaffold by name: ``"script"``, ``"function"``, ``"grammar"``, ``"grammar-fail"``, ``"grammar-fine"``,
    ``"grammar-dense"`` or a registered one (:data:`SCAFFOLDS`).

    Raises:
        wmrl.core.registry.UnknownName: an unknown name (a ValueError; the message lists the registered ones).
    """
    return SCAFFOLDS.get(name)()
