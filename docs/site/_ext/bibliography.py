"""The papers fairfl's code and docs cite, and the site's bibliography page.

Each :class:`Reference` is cited by author and year: ``{cite}`key``` on a page shows
"Li et al., 2020a" and links to the entry on the generated page
``_generated/bibliography.md``. The rule pages cite their papers the same way
(:func:`references_in`: the references whose authors and year a rule's paper line names).

:func:`citations` finds the author–year citations written in prose (docstrings, pages:
"Li, Sanjabi, Beirami & Smith, ICLR 2020", "Hu et al., IEEE TNSE 2022"); a test checks
that every one of them names a reference of :data:`REFERENCES`, so a paper cited
anywhere has its full entry here.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reference:
    """One paper (or data set) with what a reader needs to find it."""

    key: str
    authors: tuple[str, ...]
    year: int | None  # None: undated (an anonymous submission)
    title: str
    venue: str
    link: str = ""

    @property
    def surnames(self) -> tuple[str, ...]:
        """Each author's family name: the last word (a no-break space joins a longer one)."""
        return tuple(author.rsplit(" ", 1)[-1].replace("\u00a0", " ") for author in self.authors)

    @property
    def cited_as(self) -> str:
        """Author–year, without the letter that tells same-year papers apart."""
        names, year = self.surnames, self.year or "n.d."
        if len(names) == 1:
            return f"{names[0]}, {year}"
        if len(names) == 2:
            return f"{names[0]} & {names[1]}, {year}"
        return f"{names[0]} et al., {year}"


REFERENCES: tuple[Reference, ...] = (
    Reference(
        "mcmahan2017fedavg",
        (
            "H. Brendan McMahan",
            "Eider Moore",
            "Daniel Ramage",
            "Seth Hampson",
            "Blaise Agüera\u00a0y\u00a0Arcas",
        ),
        2017,
        "Communication-Efficient Learning of Deep Networks from Decentralized Data",
        "AISTATS 2017",
        "https://proceedings.mlr.press/v54/mcmahan17a.html",
    ),
    Reference(
        "li2020qffl",
        ("Tian Li", "Maziar Sanjabi", "Ahmad Beirami", "Virginia Smith"),
        2020,
        "Fair Resource Allocation in Federated Learning",
        "ICLR 2020",
        "https://openreview.net/forum?id=ByexElSYDr",
    ),
    Reference(
        "li2020fedprox",
        (
            "Tian Li",
            "Anit Kumar Sahu",
            "Manzil Zaheer",
            "Maziar Sanjabi",
            "Ameet Talwalkar",
            "Virginia Smith",
        ),
        2020,
        "Federated Optimization in Heterogeneous Networks",
        "MLSys 2020",
        "https://arxiv.org/abs/1812.06127",
    ),
    Reference(
        "li2021term",
        ("Tian Li", "Ahmad Beirami", "Maziar Sanjabi", "Virginia Smith"),
        2021,
        "Tilted Empirical Risk Minimization",
        "ICLR 2021",
        "https://openreview.net/forum?id=K5YasWXZT3O",
    ),
    Reference(
        "li2021ditto",
        ("Tian Li", "Shengyuan Hu", "Ahmad Beirami", "Virginia Smith"),
        2021,
        "Ditto: Fair and Robust Federated Learning Through Personalization",
        "ICML 2021",
        "https://proceedings.mlr.press/v139/li21h.html",
    ),
    Reference(
        "mohri2019afl",
        ("Mehryar Mohri", "Gary Sivek", "Ananda Theertha Suresh"),
        2019,
        "Agnostic Federated Learning",
        "ICML 2019",
        "https://proceedings.mlr.press/v97/mohri19a.html",
    ),
    Reference(
        "hu2022fedmgda",
        ("Zeou Hu", "Kiarash Shaloudegi", "Guojun Zhang", "Yaoliang Yu"),
        2022,
        "Federated Learning Meets Multi-objective Optimization",
        "IEEE TNSE 2022 (IEEE Transactions on Network Science & Engineering)",
        "https://arxiv.org/abs/2006.11489",
    ),
    Reference(
        "malekmohammadi2024vred",
        ("Saber Malekmohammadi", "Yaoliang Yu"),
        2024,
        "Semi-Variance Reduction for Fair Federated Learning",
        "arXiv:2406.16193",
        "https://arxiv.org/abs/2406.16193",
    ),
    Reference(
        "pillutla2021deltafl",
        ("Krishna Pillutla", "Yassine Laguel", "Jérôme Malick", "Zaid Harchaoui"),
        2021,
        "Federated Learning with Superquantile Aggregation for Heterogeneous Data",
        "arXiv:2112.09429",
        "https://arxiv.org/abs/2112.09429",
    ),
    Reference(
        "yue2021gifair",
        ("Xubo Yue", "Maher Nouiehed", "Raed Al\u00a0Kontar"),
        2021,
        "GIFAIR-FL: A Framework for Group and Individual Fairness in Federated Learning",
        "arXiv:2108.02741",
        "https://arxiv.org/abs/2108.02741",
    ),
    Reference(
        "zhang2023propfair",
        ("Guojun Zhang", "Saber Malekmohammadi", "Xi Chen", "Yaoliang Yu"),
        2023,
        "Proportional Fairness in Federated Learning",
        "Transactions on Machine Learning Research (TMLR) 2023",
        "https://openreview.net/forum?id=ryUHgEdWCQ",
    ),
    Reference(
        "upadhyay2024equitable",
        ("A. Upadhyay", "A. Hashemi"),
        2024,
        "Equitable Federated Learning with Activation Clustering",
        "arXiv:2410.19207 (v2, 2025)",
        "https://arxiv.org/abs/2410.19207",
    ),
    Reference(
        "rcfl",
        ("Anonymous",),
        None,
        "Fairness-aware Federated Learning: A Robust Approach (RC-FL)",
        "anonymous ICML submission",
    ),
    Reference(
        "ezzeldin2023fairfed",
        ("Yahya H. Ezzeldin", "Shen Yan", "Chaoyang He", "Emilio Ferrara", "Salman Avestimehr"),
        2023,
        "FairFed: Enabling Group Fairness in Federated Learning",
        "AAAI 2023",
        "https://arxiv.org/abs/2110.00857",
    ),
    Reference(
        "huang2020fedfa",
        ("Wei Huang", "Tianrui Li", "Dexian Wang", "Shengdong Du", "Junbo Zhang"),
        2020,
        "Fairness and Accuracy in Federated Learning",
        "arXiv:2012.10069",
        "https://arxiv.org/abs/2012.10069",
    ),
    Reference(
        "wang2021fedfv",
        ("Zheng Wang", "Xiaoliang Fan", "Jianzhong Qi", "Chenglu Wen", "Cheng Wang", "Rongshan Yu"),
        2021,
        "Federated Learning with Fair Averaging",
        "IJCAI 2021",
        "https://arxiv.org/abs/2104.14937",
    ),
    Reference(
        "reddi2021adaptive",
        (
            "Sashank J. Reddi",
            "Zachary Charles",
            "Manzil Zaheer",
            "Zachary Garrett",
            "Keith Rush",
            "Jakub Konečný",
            "Sanjiv Kumar",
            "H. Brendan McMahan",
        ),
        2021,
        "Adaptive Federated Optimization",
        "ICLR 2021",
        "https://openreview.net/forum?id=LkFG3lB13U5",
    ),
    Reference(
        "kingma2015adam",
        ("Diederik P. Kingma", "Jimmy Ba"),
        2015,
        "Adam: A Method for Stochastic Optimization",
        "ICLR 2015",
        "https://arxiv.org/abs/1412.6980",
    ),
    Reference(
        "ogierduterrail2022flamby",
        (
            "Jean Ogier\u00a0du\u00a0Terrail",
            "Samy-Safwan Ayed",
            "Edwige Cyffers",
            "Felix Grimberg",
            "Chaoyang He",
            "others",
        ),
        2022,
        "FLamby: Datasets and Benchmarks for Cross-Silo Federated Learning in Realistic "
        "Healthcare Settings",
        "NeurIPS 2022 Datasets and Benchmarks",
        "https://arxiv.org/abs/2210.04620",
    ),
    Reference(
        "janosi1988heart",
        ("Andras Janosi", "William Steinbrunn", "Matthias Pfisterer", "Robert Detrano"),
        1988,
        "Heart Disease",
        "UCI Machine Learning Repository",
        "https://archive.ics.uci.edu/dataset/45/heart+disease",
    ),
    Reference(
        "jain1984index",
        ("Raj Jain", "Dah-Ming Chiu", "William R. Hawe"),
        1984,
        "A Quantitative Measure of Fairness and Discrimination for Resource Allocation in "
        "Shared Computer Systems",
        "DEC Research Report TR-301",
        "https://arxiv.org/abs/cs/9809099",
    ),
    Reference(
        "becker1996adult",
        ("Barry Becker", "Ronny Kohavi"),
        1996,
        "Adult",
        "UCI Machine Learning Repository",
        "https://archive.ics.uci.edu/dataset/2/adult",
    ),
    Reference(
        "bonawitz2017secagg",
        (
            "Keith Bonawitz",
            "Vladimir Ivanov",
            "Ben Kreuter",
            "Antonio Marcedone",
            "H. Brendan McMahan",
            "Sarvar Patel",
            "Daniel Ramage",
            "Aaron Segal",
            "Karn Seth",
        ),
        2017,
        "Practical Secure Aggregation for Privacy-Preserving Machine Learning",
        "ACM CCS 2017",
        "https://eprint.iacr.org/2017/281",
    ),
    Reference(
        "bell2020secaggplus",
        ("James Bell", "Kallista Bonawitz", "Adrià Gascón", "Tancrède Lepoint", "Mariana Raykova"),
        2020,
        "Secure Single-Server Aggregation with (Poly)Logarithmic Overhead",
        "ACM CCS 2020",
        "https://eprint.iacr.org/2020/704",
    ),
    Reference(
        "abadi2016dpsgd",
        (
            "Martín Abadi",
            "Andy Chu",
            "Ian Goodfellow",
            "H. Brendan McMahan",
            "Ilya Mironov",
            "Kunal Talwar",
            "Li Zhang",
        ),
        2016,
        "Deep Learning with Differential Privacy",
        "ACM CCS 2016",
        "https://arxiv.org/abs/1607.00133",
    ),
    Reference(
        "mironov2017rdp",
        ("Ilya Mironov",),
        2017,
        "Rényi Differential Privacy",
        "IEEE CSF 2017",
        "https://arxiv.org/abs/1702.07476",
    ),
    Reference(
        "mcmahan2018dpfl",
        ("H. Brendan McMahan", "Daniel Ramage", "Kunal Talwar", "Li Zhang"),
        2018,
        "Learning Differentially Private Recurrent Language Models",
        "ICLR 2018",
        "https://openreview.net/forum?id=BJ0hF1Z0b",
    ),
    Reference(
        "andrew2021adaptiveclipping",
        ("Galen Andrew", "Om Thakkar", "H. Brendan McMahan", "Swaroop Ramaswamy"),
        2021,
        "Differentially Private Learning with Adaptive Clipping",
        "NeurIPS 2021",
        "https://arxiv.org/abs/1905.03871",
    ),
    Reference(
        "bagdasaryan2019disparate",
        ("Eugene Bagdasaryan", "Omid Poursaeed", "Vitaly Shmatikov"),
        2019,
        "Differential Privacy Has Disparate Impact on Model Accuracy",
        "NeurIPS 2019",
        "https://arxiv.org/abs/1905.12101",
    ),
    Reference(
        "kairouz2021distributed",
        ("Peter Kairouz", "Ziyu Liu", "Thomas Steinke"),
        2021,
        "The Distributed Discrete Gaussian Mechanism for Federated Learning with Secure "
        "Aggregation",
        "ICML 2021",
        "https://arxiv.org/abs/2102.06387",
    ),
)
BY_KEY = {reference.key: reference for reference in REFERENCES}


def labels() -> dict[str, str]:
    """Each reference's author–year label, with a, b, ... where two would read the same."""
    seen = Counter(reference.cited_as for reference in REFERENCES)
    count: Counter[str] = Counter()
    shown = {}
    for reference in sorted(REFERENCES, key=lambda r: (r.cited_as, r.title)):
        text = reference.cited_as
        if seen[text] > 1:
            text += "abcdefghij"[count[reference.cited_as]]
            count[reference.cited_as] += 1
        shown[reference.key] = text
    return shown


def bibliography_page() -> str:
    """The Markdown bibliography, by first author, each entry a ``bib-<key>`` target."""
    shown = labels()
    lines = [
        "# Bibliography",
        "",
        "Every paper and data set fairfl's code and these pages cite, by author and year. "
        "Generated from `docs/site/_ext/bibliography.py`; a test checks that each "
        "author–year citation in the code, the pages and the README names one of them.",
        "",
    ]
    for reference in sorted(REFERENCES, key=lambda r: (r.surnames[0].lower(), r.year or 0)):
        title = f"[{reference.title}]({reference.link})" if reference.link else reference.title
        authors = ", ".join(reference.authors).replace("\u00a0", " ")
        lines += [
            f"(bib-{reference.key})=",
            f"**{shown[reference.key]}**",
            f": {authors}. *{title}*. {reference.venue}.",
            "",
        ]
    return "\n".join(lines)


def cite_markdown(key: str) -> str:
    """MyST for a citation of ``key``: its author–year label, linked to its entry."""
    return f"{{ref}}`{labels()[key]} <bib-{key}>`"


#: An author list ("Li, Sanjabi, Beirami & Smith", "Hu et al.", "Mohri, Sivek and Suresh")
#: followed, within the same sentence part, by a year (not part of an arXiv number).
_NAME = r"[A-Z][\w'\-]*(?:\s(?:du|de|van|von)\s[A-Z][\w'\-]*)?"
CITATION = re.compile(
    rf"(?P<names>(?:{_NAME},\s)*{_NAME}(?:\set\sal\.|,?\s(?:&|and)\s{_NAME}))"
    r"[^.;\n]{0,70}?(?<![\w:.\-/])(?P<year>(?:19|20)\d\d)(?![\w.]\d|\d)"
)


def citations(text: str) -> list[tuple[tuple[str, ...], int, str]]:
    """The author–year citations of ``text``: (names, year, the text matched)."""
    found = []
    for match in CITATION.finditer(text):
        names = re.split(r",\s|\s(?:&|and)\s|\set\sal\.", match.group("names"))
        names = [name.removesuffix("'s") for name in names if name]
        found.append((tuple(names), int(match.group("year")), match.group(0)))
    return found


def _names_match(names: tuple[str, ...], reference: Reference) -> bool:
    """The first name is the first author's, each other one of the other authors'.

    A name may be one word of a longer family name ("Terrail", "Kontar").
    """

    def is_author(name: str, surname: str) -> bool:
        return name == surname or name in surname.split()

    first, *others = reference.surnames
    return is_author(names[0], first) and all(
        any(is_author(name, surname) for surname in others) for name in names[1:]
    )


def references_in(text: str) -> list[Reference]:
    """The references whose authors and year, or whose title, ``text`` cites.

    The names before a citation may begin with words that are not authors (a rule's name:
    "AFL, Li et al., ICLR 2020"): the longest run of names ending the list that are all
    authors of one reference of that year counts. A paper cited by its arXiv number
    ("Malekmohammadi & Yu, arXiv:2406.16193") or its title counts too.
    """
    lowered = text.lower()
    found = [
        r
        for r in REFERENCES
        if r.title.split(" (")[0].lower() in lowered
        or (r.venue.startswith("arXiv:") and r.venue.split()[0] in text)
    ]
    for names, year, citation in citations(text):
        venue = set(re.findall(r"[A-Z][A-Za-z]{2,}", citation.split(names[-1], 1)[-1]))
        for start in range(len(names)):
            matching = [r for r in REFERENCES if r.year == year and _names_match(names[start:], r)]
            # Same authors and year: the venue named ("MLSys 2020") tells them apart.
            matching = [r for r in matching if venue & set(r.venue.split())] or matching
            if matching:
                found += [r for r in matching if r not in found]
                break
    return found


def cite_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: Any = None,
    content: Any = None,
) -> tuple[list[Any], list[Any]]:
    """``{cite}`key```: the reference's author–year label, linked to its bibliography entry."""
    from docutils import nodes
    from sphinx.addnodes import pending_xref

    key = text.strip()
    if key not in BY_KEY:
        message = inliner.reporter.error(
            f"cite: no reference {key!r} in bibliography.py", line=lineno
        )
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    node = pending_xref(
        rawtext,
        refdomain="std",
        reftype="ref",
        reftarget=f"bib-{key}",
        refexplicit=True,
        refwarn=True,
    )
    node += nodes.inline(text=labels()[key], classes=["xref", "std", "std-ref"])
    return [node], []
