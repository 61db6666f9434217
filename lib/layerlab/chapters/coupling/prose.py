"""Sentences of the coupling chapter whose truth depends on the numbers: one generated sentence per
outcome, glued into the page (never typed). Aubry et al., ICLR 2025.

:func:`prose_glue` returns every sentence and the claim readings as Markdown for ``{glue:md}``;
:func:`excess_table` the compact summary of coupling against each model's own null that the page shows.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from layerlab.chapters.coupling.verdicts import setting_cols
from layerlab.report.claims import Claim, fmt, key_findings, what_would_change

__all__ = ["FIG1A_RANGE", "ctr_sentence", "excess_table", "glue_id", "linearisation_sentence", "prose_glue",
           "token_sentence"]

FIG1A_RANGE = (0.889, 0.954)
"""The coupling range of the paper's Fig. 1a (read by eye; ``fig1a_leaderboard.csv``)."""


def ctr_sentence(n: dict[str, Any]) -> str:
    """Where the trace-normalised null sits relative to the paper's Fig. 1a range."""
    lo, hi = FIG1A_RANGE
    spec, trained = n["ctr_spec"], n["ctr_trained"]
    where = ("inside" if lo <= spec <= hi else "below" if spec < lo else "above")
    head = (f"The spectrum-matched null alone gives a trace-normalised score of {spec:.3f}, {where} the range of "
            "the paper's "
            f"Fig. 1a ({lo}–{hi}); the trained model gives {trained:.3f}.")
    if where == "inside":
        return head + " A value in that range is therefore reachable with unrelated bases, from the spectrum alone."
    return head + (" Here the null stays outside that range, but its level is set by the spectra, so a "
                   "trace-normalised value is read only against its own null.")


def token_sentence(n: dict[str, Any]) -> str:
    """How the random-init twin's token self-coupling compares with the spectrum-matched null's."""
    init, null, tnull = n["tok_init"], n["tok_null"], n["tok_init_null"]
    if init > max(null, tnull):
        return (f"The random-init twin's token self-coupling ({init:.3f}) lies above the spectrum-matched nulls "
                f"({null:.3f} for the trained model, {tnull:.3f} for the twin): shared weights alone make the token "
                "Jacobians of one block alike, so the twin, each against its own null, is the control of C3.")
    return (f"The random-init twin's token self-coupling ({init:.3f}) does not exceed the spectrum-matched nulls "
            f"({null:.3f}, {tnull:.3f}): at initialisation the token Jacobians of one block are no more alike than "
            "unrelated matrices with the same spectra.")


def linearisation_sentence(n: dict[str, Any]) -> str:
    """What the linearisation cosine of the trained model says."""
    c = n["lin_t"]
    if c >= 0.95:
        return (f"The cosine between the linearised prediction and the true last state is {c:.2f}: composing the "
                "blocks' Jacobians nearly reproduces the trajectory's end point.")
    if c >= 0.5:
        return (f"The cosine between the linearised prediction and the true last state is {c:.2f}: the product of "
                "Jacobians gets the direction roughly but not closely; the blocks are only partly linear along "
                "the trajectory.")
    return (f"The cosine between the linearised prediction and the true last state is {c:.2f}: the product of "
            "the blocks' Jacobians does not reproduce where the trajectory ends, so the blocks are far from linear "
            "along it, whatever their singular directions do.")


def excess_table(r: Any) -> pd.DataFrame:
    """Prompt means of coupling minus each model's own spectrum-matched null, per (K, normalisation):
    trained model, random-init twins, and the nulls' own levels (compact; 3 decimals)."""
    rows = []
    for label, col in setting_cols(r.preset.ks).items():
        rows.append({"setting": label, "trained": r.trained[col].mean(),
                     "its null": r.trained[f"spectrum:{col}"].mean(),
                     "excess, trained": r.trained[f"excess:{col}"].mean(),
                     "excess, random init": r.init[f"excess:{col}"].mean()})
    df = pd.DataFrame(rows)
    num = df.columns.drop("setting")
    df[num] = df[num].round(3) + 0.0  # + 0.0: no "-0.000"
    return df


def reading_sentence(c: Claim) -> str:
    """The claim's reading as one sentence for the prose: its generated reading, or for a claim whose
    inputs are missing its verdict and the reason (ending in a full stop, so that the next sentence of
    the paragraph does not run on)."""
    if c.reading:
        text = c.reading
    elif c.ours is None:
        reason = (c.note or "its inputs are missing").removeprefix("not computed: ")
        text = f"{c.verdict}, because it cannot be tested on this run: {reason}"
    else:
        text = c.note or f"ours {fmt(c.ours)}"
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def prose_glue(r: Any, rows: list[Claim]) -> dict[str, Any]:
    """Every generated sentence and claim reading as Markdown: ``coupling_ctr``, ``coupling_tokens``,
    ``coupling_lin``, ``reading_<id>`` per claim, ``coupling_key_findings`` and ``coupling_change_mind`` (the
    "What would change our mind" list, one bullet per claim row)."""
    from IPython.display import Markdown

    n = r.numbers
    out: dict[str, Any] = {"coupling_ctr": Markdown(ctr_sentence(n)), "coupling_tokens": Markdown(token_sentence(n)),
                           "coupling_lin": Markdown(linearisation_sentence(n)),
                           "coupling_key_findings": Markdown(key_findings(rows)),
                           "coupling_change_mind": Markdown(what_would_change(rows))}
    for c in rows:
        out[f"reading_{glue_id(c.id)}"] = Markdown(_plain(reading_sentence(c)))
    return out


def glue_id(claim_id: str) -> str:
    """A claim id as a glue-name fragment: "C10 (digits)" -> "C10_digits", "C3-out" -> "C3_out"."""
    return "".join(ch if ch.isalnum() else "_" for ch in claim_id).strip("_").replace("__", "_")


def _plain(text: str) -> str:
    for ch in ("*", "_", "`", "[", "]", "{", "}", "|", "<", ">"):
        text = text.replace(ch, "\\" + ch)
    return text
