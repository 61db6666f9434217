"""Claim tables: every chapter ends with one, generated from its results.

A :class:`Claim` pairs a paper's claim (with its provenance tag: ``paper``, ``secondary``,
``reconstructed``, ``environment`` for facts about this environment, ``identity`` for exact
mathematical identities) with our estimate, its 95% CI, the null model or control it is compared
with, and a verdict from a fixed vocabulary (:data:`VERDICTS`). The verdict helpers turn CIs into
verdicts with one explicit rule each, so the rule is visible in the code that builds the table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from html import escape
from typing import Any

import pandas as pd

__all__ = [
    "COLUMNS",
    "MAIN_COLUMNS",
    "Claim",
    "ClaimTable",
    "TAGS",
    "VERDICTS",
    "claim_table",
    "render",
    "fmt",
    "fmt_interval",
    "interval_digits",
    "key_findings",
    "level_mark",
    "level_text",
    "plain_unit",
    "what_would_change",
    "verdict_from_ci",
    "verdict_identity",
    "verdict_within",
]

VERDICTS = ("supported", "not supported", "contradicted", "inconclusive", "not testable offline")
TAGS = ("paper", "secondary", "reconstructed", "environment", "identity")
COLUMNS = ["id", "claim", "tag", "paper", "ours", "95% CI", "null / control", "verdict"]


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One row of a chapter's claim table.

    id: short stable id (e.g. "R1"); claim: the statement tested; paper: what the source says (a
    number or a phrase); tag: provenance of ``paper`` (one of :data:`TAGS`); ours: our estimate (None
    when not testable); ci_low/ci_high: its CI, at ``ci_level`` when that is given (a sequential design's
    repeated interval, e.g. 0.975), else 95%; null: the null model / control and its value;
    verdict: one of :data:`VERDICTS`; note: caveats (protocol differences, offline model).
    unit/n: what was resampled and how many (e.g. "documents", 6); rule: the name of the verdict rule
    (:mod:`layerlab.report.verdicts`); reading: the generated sentence that states the outcome;
    remedy: for an undecided row, what would decide it, as its rule states it (``Decision.remedy``; ""
    for the default, more units or a larger effect); undo: for a supported row, what would undo it, where
    its rule states it (``Decision.undo``, e.g. a family's correction). Build rows from evidence with
    :meth:`Claim.decided`.
    """

    id: str
    claim: str
    paper: str
    tag: str
    ours: float | None
    ci_low: float | None
    ci_high: float | None
    null: str
    verdict: str
    note: str = ""
    unit: str = ""
    n: int | None = None
    rule: str = ""
    reading: str = ""
    remedy: str = ""
    undo: str = ""
    ci_level: float | None = None  # the interval's confidence level when it is not 95% (None: 95%)

    def __post_init__(self) -> None:
        tag = self.tag.strip("[]")
        if tag not in TAGS:
            raise ValueError(f"claim {self.id}: unknown tag {self.tag!r}; use one of {', '.join(TAGS)}")
        object.__setattr__(self, "tag", tag)
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.id}: unknown verdict {self.verdict!r}; use one of {VERDICTS}")
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError(f"claim {self.id}: give both ci_low and ci_high, or neither")
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"claim {self.id}: ci_low {self.ci_low} > ci_high {self.ci_high}")
        if self.ci_level is not None and not 0 < self.ci_level < 1:
            raise ValueError(f"claim {self.id}: ci_level must be in (0, 1), got {self.ci_level}")
        if self.ours is None and self.verdict not in ("not testable offline", "inconclusive"):
            raise ValueError(
                f"claim {self.id}: no estimate, so the verdict must be 'not testable offline' or 'inconclusive'"
            )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def decided(
        cls, *, id: str, claim: str, paper: str, tag: str, evidence: Any, decision: Any, null: str, note: str = "",
        ci_level: float | None = None,
    ) -> Claim:
        """A row from :class:`layerlab.report.inference.Evidence` and the
        :class:`layerlab.report.verdicts.Decision` a rule took on it (estimate, interval, unit, n, rule,
        verdict and reading all come from them, never typed); ``ci_level`` when the evidence's interval is
        not a 95% one (a sequential design's repeated interval): the rule's reading, which quotes the
        interval as a 95% CI, then quotes it at its level."""
        reading = decision.reading
        mark = level_mark(ci_level)
        if mark and evidence.low is not None:
            shown = fmt_interval(evidence.low, evidence.high)
            reading = reading.replace(f"95% CI {shown}", f"{level_text(ci_level)} CI {shown}")
        return cls(
            id=id,
            claim=claim,
            paper=paper,
            tag=tag,
            ours=evidence.estimate,
            ci_low=evidence.low,
            ci_high=evidence.high,
            null=null,
            verdict=decision.verdict,
            note=note,
            unit=evidence.unit,
            n=evidence.n,
            rule=decision.rule,
            reading=reading,
            remedy=decision.remedy,
            undo=decision.undo,
            ci_level=ci_level,
        )


def plain_unit(unit: str) -> str:
    """The plain unit of a compound unit description ("examples (CI); 30 blocks (permutation)" -> "examples",
    "seeds (paired)" -> "seeds"; "" -> "units"), for sentences such as "more examples would decide it"."""
    return re.split(r"[;(,]", unit or "")[0].strip() or "units"


def fmt(x: float | None, digits: int = 3) -> str:
    """Compact number formatting for tables (``digits`` significant digits; '—' for None/NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    return f"{x:.0f}" if 10**digits <= abs(x) < 1e6 else f"{x:.{digits}g}"


def _rounded_short(x: float, d: int) -> bool:
    """True when rounding ``x`` to ``d`` significant digits carries into its leading digit, so that it prints
    as a rounder number than it is: 0.04997 -> "0.05" (which reads as the 5% line itself), 1.9996 -> "2",
    0.0997 -> "0.1"; not 0.04205 -> "0.042", whose leading digit stands."""
    s = fmt(x, d)
    if s == "—" or x == 0 or float(s) == x:
        return False
    (a, ea), (b, eb) = (f"{abs(v):.17e}".split("e") for v in (x, float(s)))  # mantissa, exponent
    return (a[0], ea) != (b[0], eb)


def interval_digits(low: float | None, high: float | None, digits: int = 3) -> int:
    """The significant digits at which an interval's two ends print differently and neither end's rounding
    carries into its leading digit (``digits`` at least, 8 at most): [29.002, 29.015] must not read "[29, 29]", a
    zero-width interval that it is not, and [0.0438, 0.04997] not "[0.0438, 0.05]", an interval that reaches a
    5% line it stays below."""
    if low is None or high is None or not low < high:
        return digits
    d = digits
    while d < 8 and (fmt(low, d) == fmt(high, d) or _rounded_short(low, d) or _rounded_short(high, d)):
        d += 1
    return d


def fmt_interval(low: float | None, high: float | None, digits: int = 3) -> str:
    """"[low, high]" at :func:`interval_digits` (so that distinct ends never print alike)."""
    d = interval_digits(low, high, digits)
    return f"[{fmt(low, d)}, {fmt(high, d)}]"


def level_text(level: float | None) -> str:
    """A confidence level as the book writes it: "95%" for ``None``, "97.5%" for 0.975."""
    return "95%" if level is None else f"{100 * level:.4g}%"


def level_mark(level: float | None) -> str:
    """" (97.5%)" for an interval that is not a 95% one, "" for a 95% interval (``None`` or 0.95)."""
    return "" if level_text(level) == "95%" else f" ({level_text(level)})"


def _checked(claims: Iterable[Claim], where: str) -> list[Claim]:
    """The claims as a list; one clear error for none or for repeated ids."""
    claims = list(claims)
    if not claims:
        raise ValueError(f"{where} needs at least one Claim")
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError(f"claim ids must be unique, got {ids}")
    return claims


def claim_table(claims: Iterable[Claim], digits: int = 3) -> pd.DataFrame:
    """DataFrame with :data:`COLUMNS` (+ ``note`` when any claim has one), one row per claim."""
    claims = _checked(claims, "claim_table")
    rows = []
    for c in claims:
        ci = "—" if c.ci_low is None else fmt_interval(c.ci_low, c.ci_high, digits) + level_mark(c.ci_level)
        row = {
            "id": c.id,
            "claim": c.claim,
            "tag": f"[{c.tag}]",
            "paper": c.paper,
            "ours": fmt(c.ours, interval_digits(c.ci_low, c.ci_high, digits)),
            "95% CI": ci,
            "null / control": c.null,
            "verdict": c.verdict,
        }
        if any(x.n is not None for x in claims):
            row["n (unit)"] = "—" if c.n is None else f"{c.n} {c.unit}".strip()
        if any(x.note for x in claims):
            row["note"] = c.note
        rows.append(row)
    return pd.DataFrame(rows)


def verdict_from_ci(
    low: float, high: float, direction: str = "greater", threshold: float = 0.0, min_effect: float = 0.0
) -> str:
    """Verdict for a directional claim "the effect is > threshold" (``direction="greater"``) or
    "< threshold" (``"less"``), given the effect's CI [low, high].

    supported: the CI lies beyond ``threshold`` in the claimed direction; contradicted: it lies beyond
    it in the opposite direction; not supported: the CI excludes every effect larger than
    ``min_effect`` in the claimed direction (needs ``min_effect > 0``); inconclusive otherwise.
    """
    if low > high:
        raise ValueError(f"low {low} > high {high}")
    if direction == "less":
        low, high, threshold = -high, -low, -threshold
    elif direction != "greater":
        raise ValueError(f"direction must be 'greater' or 'less', got {direction!r}")
    if low > threshold:
        return "supported"
    if high < threshold:
        return "contradicted"
    if min_effect > 0 and high < threshold + min_effect:
        return "not supported"
    return "inconclusive"


def verdict_within(low: float, high: float, band: tuple[float, float]) -> str:
    """Verdict for "the value lies in ``band``": supported if the CI is inside the band, not supported if
    the CI and the band are disjoint, inconclusive if they overlap partly."""
    lo, hi = band
    if lo <= low and high <= hi:
        return "supported"
    if high < lo or low > hi:
        return "not supported"
    return "inconclusive"


def verdict_identity(max_abs_error: float, tol: float) -> str:
    """Verdict for an exact identity checked numerically: supported iff the max |error| <= ``tol``."""
    return "supported" if max_abs_error <= tol else "contradicted"


VERDICT_COLOURS = {
    "supported": "#d9ead3",
    "not supported": "#fce5cd",
    "contradicted": "#f4cccc",
    "inconclusive": "#eeeeee",
    "not testable offline": "#eeeeee",
}
"""Background of the verdict cell per verdict (light: readable in both themes with dark text)."""


#: Columns of the rendered table's first line (the rest of a claim is its second line).
MAIN_COLUMNS = ("id", "claim", "ours", "95% CI", "n (unit)", "verdict")


@dataclass(frozen=True)
class ClaimTable:
    """The claim table as the book shows it (:func:`render`): two lines per claim, so that the long
    texts (the paper's value, the null or control, the note, the rule) run across the width of the
    table instead of down narrow columns. First line: id, claim, our estimate, its 95% CI, n (unit)
    and the verdict (coloured, spanning both lines); second line: the paper's value with its
    provenance tag, the null or control, the rule and the note. ``data`` is :func:`claim_table`."""

    claims: tuple[Claim, ...]
    digits: int = 3
    units: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _checked(self.claims, "the claim table")  # fail when built, not when shown

    @property
    def data(self) -> pd.DataFrame:
        """:func:`claim_table` of the claims (the plain-text view; what tests compare)."""
        return claim_table(self.claims, self.digits)

    def to_html(self) -> str:
        units = dict(self.units)
        has_n = any(c.n is not None for c in self.claims)
        cols = [c for c in MAIN_COLUMNS if has_n or c != "n (unit)"]
        head = "".join(f'<th class="claim-{_slug(c)}" scope="col">{escape(c)}</th>' for c in cols)
        width = "".join(f'<col class="claim-{_slug(c)}">' for c in cols)
        body = []
        for c, row in zip(self.claims, self.data.to_dict("records")):
            ours = row["ours"] if row["ours"] == "—" else f"{row['ours']} {units.get(c.id, '')}".strip()
            cells = [f'<th class="claim-id" scope="row">{escape(c.id)}</th>',
                     f'<td class="claim-claim">{escape(c.claim)}</td>',
                     f'<td class="claim-ours">{escape(ours)}</td>',
                     f'<td class="claim-ci">{escape(row["95% CI"])}</td>']
            if has_n:
                cells.append(f'<td class="claim-n">{escape(row["n (unit)"])}</td>')
            colour = VERDICT_COLOURS.get(c.verdict, "")
            cells.append(f'<td class="claim-verdict" rowspan="2" style="background-color: {colour}; color: #000">'
                         f"{escape(c.verdict)}</td>")
            detail = [f'<span class="claim-label">Paper</span> <span class="claim-tag">[{escape(c.tag)}]</span> '
                      f"{escape(c.paper)}",
                      f'<span class="claim-label">Null / control</span> {escape(c.null)}']
            if c.rule:
                detail.append(f'<span class="claim-label">Rule</span> {escape(c.rule)}')
            if c.note:
                detail.append(f'<span class="claim-label">Note</span> {escape(c.note)}')
            lines = "".join(f"<div>{d}</div>" for d in detail)
            body.append(f'<tbody class="claim-row"><tr class="claim-main">{"".join(cells)}</tr>'
                        f'<tr class="claim-detail"><td></td><td colspan="{len(cols) - 2}">{lines}</td></tr></tbody>')
        return (f'<table class="claim-table"><colgroup>{width}</colgroup><thead><tr>{head}</tr></thead>'
                f'{"".join(body)}</table>')

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        return self.data.to_string(index=False)


def _slug(column: str) -> str:
    return {"95% CI": "ci", "n (unit)": "n"}.get(column, column)


def render(claims: Iterable[Claim], digits: int = 3, *, units: dict[str, str] | None = None) -> ClaimTable:
    """The claim table as the book shows it (:class:`ClaimTable`): HTML-escaped text (a claim such as
    "rho < 0" keeps its "<"), no index column, two lines per claim, the verdict cell coloured.
    ``units``: {claim id: unit} appended to that row's estimate (e.g. ``{"G3": "%"}``)."""
    return ClaimTable(claims=tuple(claims), digits=digits, units=tuple((units or {}).items()))


def key_findings(claims: Iterable[Claim]) -> str:
    """The "Key findings" a chapter opens with, generated from its claim table so that it always matches.

    Returns MyST Markdown (a bullet list, for ``{glue:md}`` with ``:format: myst`` inside an admonition):
    one bullet per empirical verdict class in the order supported, contradicted, not supported,
    inconclusive, not testable offline, each listing its claims by id with the row's generated reading
    (or, for rows without one, the estimate and interval); then one bullet that names the [identity]
    rows, which are checks of algebra and never count as findings.
    """
    claims = list(claims)
    if not claims:
        raise ValueError("key_findings needs at least one Claim (the chapter's claim table)")
    lines: list[str] = []
    found = [c for c in claims if c.tag != "identity"]
    for verdict in ("supported", "contradicted", "not supported", "inconclusive", "not testable offline"):
        rows = [c for c in found if c.verdict == verdict]
        if not rows:
            continue
        lines.append(f"- **{verdict.capitalize()}** ({len(rows)} of {len(found)} empirical claims):")
        for c in rows:
            if c.reading:
                why = c.reading
            elif c.ours is None:
                why = c.note or "not computed"
                why = why[:1].upper() + why[1:]  # a note ("not computed: ...") is a sentence here
                why = why if why.endswith((".", "!", "?")) else why + "."
            else:
                ci = "" if c.ci_low is None else f", {level_text(c.ci_level)} CI {fmt_interval(c.ci_low, c.ci_high)}"
                n = "" if c.n is None else f", n = {c.n} {c.unit}".rstrip()
                why = f"ours {fmt(c.ours, interval_digits(c.ci_low, c.ci_high))}{ci}{n}."
            lines.append(f"  - **{c.id}** {_md_escape(c.claim)}. {_md_escape(why)}")
    ident = [c for c in claims if c.tag == "identity"]
    if ident:
        held = [c.id for c in ident if c.verdict == "supported"]
        failed = [c.id for c in ident if c.verdict != "supported"]
        text = f"- **Identities** (checks of algebra, not findings): {', '.join(held) or 'none'} hold"
        if failed:
            text += f"; {', '.join(failed)} FAIL (a bug, not a finding)"
        lines.append(text + ".")
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    """Text safe inside MyST Markdown: characters that would start markup are escaped."""
    for ch in ("\\", "*", "_", "`", "[", "]", "<", ">", "$", "{", "}", "|"):
        text = text.replace(ch, "\\" + ch)
    return text


def what_would_change(claims: Iterable[Claim]) -> str:
    """The "What would change our mind" list a chapter ends with, generated from its claim table: for
    each empirical row, what a replication would have to show to change its verdict (MyST bullets).
    A row with a named rule is judged against its rule (a band, a direction, a margin), not against
    its null: "clears the null" would be false for a band rule such as "≈ −0.50 ± 0.05"."""
    lines = []
    for c in claims:
        if c.tag == "identity":
            continue
        n = f"{c.n} {c.unit}".strip() if c.n is not None else "the units measured"
        units = plain_unit(c.unit)
        ci = "" if c.ci_low is None else f" {fmt_interval(c.ci_low, c.ci_high)}{level_mark(c.ci_level)}"
        its = f"its interval{ci}" if ci else f"its estimate {fmt(c.ours)} (no interval)"
        reason = c.note.removeprefix("not computed: ")
        if c.verdict == "not testable offline":
            text = f"not testable here: {reason or 'its inputs are not available offline'}."
        elif c.verdict == "supported" and c.undo:  # the rule says what would undo it (e.g. a family of tests)
            text = (f"{c.reading.rstrip('.')}, under the rule ({c.rule}); {c.undo}, or a different protocol, would "
                    "undo the support.")
        elif c.verdict == "supported":
            met = f"meets the rule ({c.rule})" if c.rule else f"clears the null ({c.null})"
            away = "out of the rule" if c.rule else "to the null"
            text = (f"{its} over {n} {met}; new {units} that moved it {away}, or a different protocol that moved "
                    "the estimate, would undo the support.")
        elif c.verdict == "contradicted":
            failed = (f"fails the rule ({c.rule}) with evidence the other way" if c.rule else
                      f"lies on the wrong side of the null ({c.null})")
            text = (f"{its} over {n} {failed}; only evidence on the claimed side, not merely more "
                    f"{units}, would revive the claim.")
        elif c.verdict == "not supported":
            rule = f" ({c.rule})" if c.rule else ""
            text = (f"{its} over {n} excludes effects of the claimed size{rule}; an effect beyond the "
                    "equivalence margin in a replication would reopen it.")
        elif c.ours is None:
            # the reason may be a design limit (too few units at this profile), so a run may not suffice
            text = f"not computed here ({reason or 'missing inputs'}); a run that meets this could decide it."
        else:
            under = f" under the rule ({c.rule})" if c.rule else ""
            undecided = f"undecided at {n}{' (interval' + ci + ')' if ci else ''}{under}"
            # the reading's first clause says why; the rule's remedy says what would decide it (a design limit
            # such as a smallest attainable p, a disagreement between settings, one run) or, by default, more units
            why = f" {c.reading.partition(': ')[0].strip().rstrip('.')}." if c.reading else ""
            remedy = c.remedy or f"More {units}, or a larger effect, would decide it."
            text = f"{undecided}.{why} {remedy}"
        lines.append(f"- **{c.id}** ({c.verdict}): {_md_escape(text)}")
    return "\n".join(lines) if lines else "- Every row is an identity: only a bug would change them."
