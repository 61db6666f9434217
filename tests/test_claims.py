import dataclasses
import math
from html.parser import HTMLParser

import numpy as np
import pytest

from layerlab.report import claims
from layerlab.report.claims import Claim


def _claim(**kw):
    base = dict(
        id="C1",
        claim="x > 0",
        paper="x > 0",
        tag="[reconstructed]",
        ours=1.0,
        ci_low=0.5,
        ci_high=1.5,
        null="random init: 0.0",
        verdict="supported",
    )
    base.update(kw)
    return Claim(**base)


def test_table_columns_and_formatting():
    rows = [
        _claim(),
        _claim(
            id="C2", ours=None, ci_low=None, ci_high=None, verdict="not testable offline", note="needs the base model"
        ),
    ]
    df = claims.claim_table(rows)
    assert list(df.columns) == [*claims.COLUMNS, "note"]
    assert df.loc[0, "tag"] == "[reconstructed]"
    assert df.loc[0, "95% CI"] == "[0.5, 1.5]"
    assert df.loc[1, "ours"] == "—" and df.loc[1, "95% CI"] == "—"
    assert list(claims.claim_table([_claim()]).columns) == claims.COLUMNS


def test_claim_validation():
    with pytest.raises(ValueError, match="verdict"):
        _claim(verdict="true")
    with pytest.raises(ValueError, match="tag"):
        _claim(tag="rumour")
    with pytest.raises(ValueError, match="ci_low"):
        _claim(ci_low=2.0, ci_high=1.0)
    with pytest.raises(ValueError, match="both"):
        _claim(ci_high=None)
    with pytest.raises(ValueError, match="unique"):
        claims.claim_table([_claim(), _claim()])


@pytest.mark.parametrize(
    "low, high, direction, min_effect, expected",
    [
        (0.1, 0.3, "greater", 0, "supported"),
        (-0.3, -0.1, "greater", 0, "contradicted"),
        (-0.1, 0.3, "greater", 0, "inconclusive"),
        (-0.01, 0.01, "greater", 0.05, "not supported"),
        (-0.3, -0.1, "less", 0, "supported"),
        (0.1, 0.3, "less", 0, "contradicted"),
    ],
)
def test_verdict_from_ci(low, high, direction, min_effect, expected):
    assert claims.verdict_from_ci(low, high, direction, 0.0, min_effect) == expected


def test_verdict_within_and_identity():
    assert claims.verdict_within(30, 36, (20, 50)) == "supported"
    assert claims.verdict_within(60, 70, (20, 50)) == "not supported"
    assert claims.verdict_within(45, 55, (20, 50)) == "inconclusive"
    assert claims.verdict_identity(1e-12, 1e-8) == "supported"
    assert claims.verdict_identity(1e-3, 1e-8) == "contradicted"


def test_fmt():
    assert claims.fmt(None) == "—"
    assert claims.fmt(math.nan) == "—"
    assert claims.fmt(34.123) == "34.1"
    assert claims.fmt(1.5e-6) == "1.5e-06"


def test_render_escapes_colours_and_drops_the_index():
    rows = [
        claims.Claim(
            id="R1",
            claim="rho < 0 & falls",
            paper="x",
            tag="paper",
            ours=0.1,
            ci_low=0.0,
            ci_high=1.0,
            null="n",
            verdict="supported",
        ),
        claims.Claim(
            id="R2",
            claim="b",
            paper="x",
            tag="paper",
            ours=0.1,
            ci_low=0.0,
            ci_high=1.0,
            null="n",
            verdict="contradicted",
        ),
    ]
    html = claims.render(rows).to_html()
    assert "rho &lt; 0 &amp; falls" in html  # the claim text survives HTML
    assert claims.VERDICT_COLOURS["supported"] in html and claims.VERDICT_COLOURS["contradicted"] in html
    assert 'class="claim-table"' in html and ">0</th>" not in html  # no 0..N index column


def test_key_findings_follows_the_table():
    rows = [
        claims.Claim(id="R1", claim="lens = logits", paper="exact", tag="identity", ours=1e-9, ci_low=None,
                     ci_high=None, null="—", verdict="supported"),
        claims.Claim(id="R2", claim="loss falls with depth", paper="x", tag="paper", ours=-0.5, ci_low=-0.9,
                     ci_high=-0.1, null="0", verdict="supported", reading="The estimate lies below 0."),
        claims.Claim(id="R3", claim="norm < 2*x", paper="x", tag="paper", ours=0.1, ci_low=-0.2, ci_high=0.4,
                     null="0", verdict="inconclusive", unit="documents", n=5),
    ]
    text = claims.key_findings(rows)
    assert "**Supported** (1 of 2 empirical claims)" in text
    assert "**R2** loss falls with depth. The estimate lies below 0." in text
    assert "**Inconclusive** (1 of 2" in text and "n = 5 documents" in text
    assert "norm \\< 2\\*x" in text  # markup escaped
    assert "Identities" in text and "R1 hold" in text
    assert "Contradicted" not in text  # no empty verdict class
    flipped = [rows[0], rows[1], claims.Claim(**{**rows[2].to_dict(), "verdict": "contradicted"})]
    assert "**Contradicted** (1 of 2" in claims.key_findings(flipped)
    with pytest.raises(ValueError, match="at least one Claim"):
        claims.key_findings([])


def test_what_would_change_follows_each_verdict():
    base = dict(claim="x", paper="x", tag="paper", ours=0.3, ci_low=0.1, ci_high=0.5, null="0", unit="documents",
                n=12)
    rows = [claims.Claim(id="A", verdict="supported", **base),
            claims.Claim(id="B", verdict="inconclusive", **{**base, "ci_low": -0.1}),
            claims.Claim(id="C", claim="x", paper="x", tag="paper", ours=None, ci_low=None, ci_high=None, null="—",
                         verdict="inconclusive", note="not computed: no GPU"),
            claims.Claim(id="I", claim="x", paper="x", tag="identity", ours=0.0, ci_low=None, ci_high=None,
                         null="—", verdict="supported"),
            claims.Claim(id="D", verdict="supported", **{**base, "null": "-0.5 under the null",
                                                          "rule": "band [0.2, 0.6]"}),
            claims.Claim(id="E", verdict="contradicted", **{**base, "rule": "band [0.81, 1]"}),
            claims.Claim(id="F", verdict="not testable offline", **{**base, "note": "another model"}),
            claims.Claim(id="H", verdict="supported", **{**base, "ci_low": None, "ci_high": None}),
            claims.Claim(id="G", verdict="inconclusive", **{**base, "reading": "It depends on the readout: a, b.",
                                                             "remedy": "Agreement of the readouts would decide it."})]
    text = claims.what_would_change(rows)
    assert "**A** (supported): its interval \\[0.1, 0.5\\] over 12 documents clears the null" in text
    assert "**B** (inconclusive): undecided at 12 documents" in text
    assert "not computed here (no GPU)" in text and "**I**" not in text
    # the key findings read the note as a sentence of its own ("x. Not computed: ...", not "x. not computed")
    assert "  - **C** x. Not computed: no GPU." in claims.key_findings(rows).split("\n")
    # a row with a rule is judged against the rule, not its null (a band can sit on the null value)
    ci = "its interval \\[0.1, 0.5\\] over 12 documents"
    assert f"**D** (supported): {ci} meets the rule (band \\[0.2, 0.6\\])" in text
    assert f"**E** (contradicted): {ci} fails the rule (band \\[0.81, 1\\])" in text
    assert "**F** (not testable offline): not testable here: another model." in text
    # a family row is read by its tests, not by the interval of its largest member
    # (the rule says so in ``undo``: a rule's name is never parsed)
    fam = claims.Claim(id="K", verdict="supported", **{**base, "rule": "two-sided: effect ≠ 0; any of 141 (Holm)",
                                                        "reading": "10 of 141 tests are significant (two-sided) "
                                                                   "after Holm correction (n = 17 members each).",
                                                        "undo": "new documents that left no test significant "
                                                                "after the correction"})
    assert claims.what_would_change([fam]) == (
        "- **K** (supported): 10 of 141 tests are significant (two-sided) after Holm correction (n = 17 members "
        "each), under the rule (two-sided: effect ≠ 0; any of 141 (Holm)); new documents that left no test "
        "significant after the correction, or a different protocol, would undo the support.")
    named_only = dataclasses.replace(fam, undo="")
    assert "meets the rule (two-sided: effect ≠ 0; any of 141 (Holm))" in claims.what_would_change([named_only])
    assert "undecided at" not in text.split("**F**")[1].split("**G**")[0]
    # an undecided row says why (its rule's reading) and what would decide it: the remedy its rule states, else
    # the default (more units, or a larger effect); the wording is never guessed from the reading's phrases
    assert "**H** (supported): its estimate 0.3 (no interval) over 12 documents clears the null" in text
    g = text.split("**G**")[1]
    assert "It depends on the readout." in g and "a, b" not in g
    assert g.endswith("It depends on the readout. Agreement of the readouts would decide it.")
    assert "more documents" not in g.lower()
    assert "**B** (inconclusive): undecided at 12 documents (interval \\[-0.1, 0.5\\]). More documents" in text
    # a not-computed row may be short of units by design: running it as it is need not decide it
    assert "not computed here (no GPU); a run that meets this could decide it." in text


def test_what_would_change_says_when_no_effect_size_can_decide_at_this_n():
    """Three seeds cannot reach p <= 0.025 with a sign-flip test (smallest p 1/8): the list says so,
    and does not promise that a larger effect would decide the row."""
    from layerlab.report.inference import mean_effect
    from layerlab.report.verdicts import Direction

    ev = mean_effect(np.array([-0.02, -0.05, -0.04]), unit="seeds")
    dec = Direction().decide(ev)
    assert dec.verdict == "inconclusive"
    row = claims.Claim.decided(id="C6", claim="x", paper="x", tag="paper", evidence=ev, decision=dec, null="0")
    text = claims.what_would_change([row])
    assert dec.remedy == ("With n = 3 seeds the smallest attainable p is 0.12 > 0.025, so no effect size can decide "
                          "it: only more seeds would.")
    assert text.endswith("cannot decide the claim. " + claims._md_escape(dec.remedy))
    assert "More seeds, or a larger effect" not in text


class _Cells(HTMLParser):
    """The claim table's text per claim (one <tbody> each): {"main": [cell texts], "detail": text,
    "rowspan": the verdict cell's rowspan}."""

    def __init__(self):
        super().__init__()
        self.rows, self._cell, self._where = [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tbody":
            self.rows.append({"main": [], "detail": "", "rowspan": None})
        elif tag == "tr" and self.rows:
            self._where = "detail" if a.get("class") == "claim-detail" else "main"
        elif tag in ("td", "th") and self.rows:
            self._cell = ""
            if a.get("class") == "claim-verdict":
                self.rows[-1]["rowspan"] = a.get("rowspan")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.rows:
            if self._where == "main":
                self.rows[-1]["main"].append(self._cell)
            else:
                self.rows[-1]["detail"] += self._cell
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_render_gives_each_claim_two_lines_with_every_field():
    """The first line holds id, claim, estimate, CI, n (unit) and the verdict (spanning both lines); the
    second the paper's value with its tag, the null or control, the rule and the note, so that no long
    text is squeezed into a narrow column."""
    rows = [claims.Claim(id="A1", claim="a < b", paper="R² = 0.91", tag="paper", ours=0.12345, ci_low=0.1,
                         ci_high=0.2, null="0: template & noise", verdict="supported", note="q 0.1 & k 0.2",
                         unit="documents", n=8, rule="direction: effect > 0"),
            claims.Claim(id="A4", claim="c", paper="p", tag="reconstructed", ours=None, ci_low=None, ci_high=None,
                         null="—", verdict="not testable offline", note="needs the hub")]
    p = _Cells()
    p.feed(claims.render(rows).to_html())
    body = p.rows
    assert len(body) == 2
    a1, a4 = body
    assert a1["main"] == ["A1", "a < b", "0.123", "[0.1, 0.2]", "8 documents", "supported"]
    assert a1["rowspan"] == "2"
    for part in ("Paper", "[paper]", "R² = 0.91", "Null / control", "0: template & noise",
                 "Rule", "direction: effect > 0", "Note", "q 0.1 & k 0.2"):
        assert part in a1["detail"]
    assert a4["main"] == ["A4", "c", "—", "—", "—", "not testable offline"]
    assert "Rule" not in a4["detail"] and "needs the hub" in a4["detail"]
    no_n = _Cells()
    no_n.feed(claims.render([claims.Claim(**{**rows[0].to_dict(), "n": None})]).to_html())
    assert len(no_n.rows[0]["main"]) == 5 and "n (unit)" not in claims.render(
        [claims.Claim(**{**rows[0].to_dict(), "n": None})]).to_html()
    assert "A1" in repr(claims.render(rows))  # plain-text view


def test_what_would_change_names_the_plain_unit_of_a_compound_unit():
    base = dict(claim="x", paper="x", tag="paper", ours=0.1, ci_low=-0.4, ci_high=0.3, null="0",
                verdict="inconclusive", rule="direction: effect > 0", reading="Too little evidence: x.")
    rows = [claims.Claim(id="D5", n=128, unit="examples (CI); 30 blocks (permutation)", **base),
            claims.Claim(id="C2", n=6, unit="prompts (paired; 2 twin seeds averaged)", **base)]
    text = claims.what_would_change(rows)
    assert "More examples, or a larger effect" in text and "More prompts, or a larger effect" in text
    assert "undecided at 128 examples (CI); 30 blocks (permutation)" in text  # n keeps the full description


def test_what_would_change_says_what_the_design_lacks():
    row = claims.Claim(id="C10", claim="x", paper="x", tag="paper", ours=0.81, ci_low=0.28, ci_high=1.0, null="—",
                       n=9, unit="checkpoints of one run", verdict="inconclusive",
                       rule="design: one training run (no replicate seeds)",
                       reading="Spearman 0.81 over 9 checkpoints of a single run: checkpoints of one run are a time "
                               "series, not independent units, so no test is valid; several seeds are needed.",
                       remedy="Several seeds (replicate runs) would decide it; more checkpoints of one run would not.")
    text = claims.what_would_change([row])
    assert text.endswith("over 9 checkpoints of a single run. Several seeds (replicate runs) would decide it; more "
                         "checkpoints of one run would not.")
    assert "More checkpoints" not in text and "larger effect" not in text


def test_an_interval_never_prints_as_zero_width_when_it_is_not():
    """Diversity D9 read "29 [29, 29]" for a lag of 29.009 [29.002, 29.015] blocks: the digits grow until
    the ends differ, in the table, the key findings and the rules' readings alike."""
    assert claims.fmt_interval(29.002204, 29.015379) == "[29, 29.02]"
    assert claims.fmt_interval(0.1, 0.5) == "[0.1, 0.5]" and claims.fmt_interval(0.0, 0.0) == "[0, 0]"
    row = claims.Claim(id="D9", claim="x", paper="x", tag="paper", ours=29.00874, ci_low=29.002204,
                       ci_high=29.015379, null="0", verdict="supported", unit="examples", n=128)
    t = claims.claim_table([row]).iloc[0]
    assert t["95% CI"] == "[29, 29.02]" and t["ours"] == "29.01"
    assert "ours 29.01, 95% CI \\[29, 29.02\\]" in claims.key_findings([row])
    from layerlab.report.inference import Evidence
    from layerlab.report.verdicts import Direction

    ev = Evidence(estimate=29.00874, low=29.002204, high=29.015379, p_greater=0.001, p_less=0.999, unit="examples",
                  n=128, method="bootstrap")
    assert "95% CI [29, 29.02]" in Direction().decide(ev).reading


def test_an_interval_end_never_rounds_onto_a_shorter_number_it_is_not():
    """Calibration K25 read "0.0468 [0.0438, 0.05] ... supported (false 'supported' <= 5%)": an upper end of
    0.04997 printed as the 5% line it stays below. An end whose rounding carries into its leading digit gets
    more digits; ends that are that short number, or whose rounding only drops a trailing zero, stay short."""
    assert claims.fmt_interval(0.04378, 0.049972) == "[0.04378, 0.04997]"
    assert claims.fmt_interval(0.5, 1.9996) == "[0.5, 1.9996]"
    assert claims.fmt_interval(0.04, 0.05) == "[0.04, 0.05]" and claims.fmt_interval(-1.0, 1.0) == "[-1, 1]"
    assert claims.fmt_interval(0.0438, 0.0512) == "[0.0438, 0.0512]"  # nothing to widen
    assert claims.fmt_interval(0.019603, 0.042048) == "[0.0196, 0.042]"  # 0.0420: no carry, nothing to widen
    assert claims.fmt_interval(-0.09997, 0.5) == "[-0.09997, 0.5]"  # would read "-0.1"
    assert claims.fmt_interval(0.01, 0.0997) == "[0.01, 0.0997]"


def test_an_interval_that_is_not_95_percent_says_its_level_everywhere_it_is_shown():
    """A sequential design's repeated interval (e.g. 97.5%) is marked in the table, the key findings and
    "what would change our mind"; a 95% interval is not marked; a level outside (0, 1) is refused."""
    rep = _claim(ci_level=0.975)
    assert claims.claim_table([rep])["95% CI"].iloc[0] == "[0.5, 1.5] (97.5%)"
    assert claims.claim_table([_claim(ci_level=0.95)])["95% CI"].iloc[0] == "[0.5, 1.5]"
    assert "97.5% CI \\[0.5, 1.5\\]" in claims.key_findings([rep])  # Markdown-escaped brackets
    assert "95% CI \\[0.5, 1.5\\]" in claims.key_findings([_claim()])
    assert "\\[0.5, 1.5\\] (97.5%)" in claims.what_would_change([dataclasses.replace(rep, verdict="inconclusive")])
    assert "(97.5%)" in claims.render([rep]).to_html()
    with pytest.raises(ValueError, match="ci_level must be in"):
        _claim(ci_level=95)
    # a rule's reading quotes the interval; a row at another level quotes it at that level
    from layerlab.report.inference import Evidence
    from layerlab.report.verdicts import Direction

    ev = Evidence(estimate=1.0, low=0.5, high=1.5, p_greater=1e-4, p_less=1.0, unit="documents", n=32, method="t")
    dec = Direction().decide(ev)
    assert "95% CI [0.5, 1.5]" in dec.reading
    row = Claim.decided(id="X", claim="x > 0", paper="", tag="paper", evidence=ev, decision=dec, null="0",
                        ci_level=0.975)
    assert "97.5% CI [0.5, 1.5]" in row.reading and "95% CI" not in row.reading
