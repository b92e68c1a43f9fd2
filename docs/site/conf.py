"""Sphinx configuration of fairfl's documentation site (built by ``bash scripts/docs.sh``)."""

from __future__ import annotations

import sys
import typing
from pathlib import Path

SITE = Path(__file__).resolve().parent
REPO = SITE.parents[1]
sys.path.insert(0, str(SITE / "_ext"))

project = "fairfl"
author = "fairfl contributors"
copyright = "fairfl contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "fairfl_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["README.md", "_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# MyST: $…$ and $$…$$ maths (rendered by MathJax), ::: fences, heading anchors for
# [text](page.md#anchor) links between pages.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# The API reference: autodoc + autosummary; NumPy-style docstrings through numpydoc.
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"  # numpydoc's Parameters sections already give the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()

# Strict: broken cross-references inside fairfl fail the build (-n). References to
# other projects (flwr, numpy, torch, the standard library) have no inventory offline,
# so they are not checked.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!fairfl\b).*"),
    (r"py:.*", r"fairfl(\.\w+)*\._\w+.*"),  # private modules: not in the reference
    # Modules outside the API reference (data sets, models, reports, sweeps, the dashboard).
    (r"py:.*", r"fairfl\.(data|models|report|sweep|dashboard)\b.*"),
]
suppress_warnings = ["myst.xref_ambiguous"]

# MathJax: Debian's libjs-mathjax (MathJax 2.7, CommonHTML output) when installed, copied
# into the site by fairfl_docs, so that equations render offline (CI, the browser test);
# else Sphinx's default, MathJax 3 from its CDN, which the build refuses
# (:func:`warn_without_local_mathjax`).
LOCAL_MATHJAX = Path("/usr/share/javascript/mathjax")
HAS_LOCAL_MATHJAX = (LOCAL_MATHJAX / "config" / "TeX-AMS_CHTML.js").exists()
if HAS_LOCAL_MATHJAX:
    mathjax_path = "mathjax/MathJax.js?config=TeX-AMS_CHTML"
    # MyST marks its sections tex2jax_ignore and the maths "math"; MathJax 2 is told so
    # in its own configuration (MyST's is MathJax 3's).
    myst_update_mathjax = False
    mathjax2_config = {
        "messageStyle": "none",
        "tex2jax": {
            "ignoreClass": "tex2jax_ignore|mathjax_ignore",
            "processClass": "tex2jax_process|mathjax_process|math|output_area",
        },
    }

html_theme = "furo"
html_title = "fairfl"
html_static_path: list[str] = []
html_show_sourcelink = False


def skip_type_aliases(
    app: object, what: str, name: str, obj: object, skip: bool, options: object
) -> bool | None:
    """Leave module-level type aliases and type variables out of the reference.

    autodoc takes a subscripted generic for a class and fails on its signature; the
    aliases are named in the signatures and docstrings that use them.
    """
    import types
    import typing

    aliases = (
        types.GenericAlias,
        typing._GenericAlias,  # type: ignore[attr-defined]
        typing.TypeVar,
        getattr(typing, "TypeAliasType", ()),
    )
    if isinstance(obj, tuple(a for a in aliases if isinstance(a, type))):
        return True
    return None


def drop_generic_bases(app: object, name: str, obj: object, options: object, bases: list) -> None:
    """Leave ``Generic[T]`` out of a class's bases (its type variable has no page)."""
    bases[:] = [base for base in bases if getattr(base, "__origin__", None) is not typing.Generic]


def warn_without_local_mathjax(app: object) -> None:
    """A warning (an error under ``-W``, as scripts/docs.sh builds) when MathJax is not local.

    Without Debian's libjs-mathjax every page would load MathJax from a CDN, and its
    equations would show as raw TeX offline.
    """
    if HAS_LOCAL_MATHJAX:
        return
    from sphinx.util import logging as sphinx_logging

    sphinx_logging.getLogger(__name__).warning(
        "MathJax is not installed locally (%s): the equations would load MathJax from a "
        "CDN and show as raw TeX offline; install Debian's libjs-mathjax",
        LOCAL_MATHJAX,
    )


def setup(app: object) -> None:
    """Connect :func:`skip_type_aliases`, :func:`drop_generic_bases` and the MathJax check."""
    app.connect("autodoc-skip-member", skip_type_aliases)  # type: ignore[attr-defined]
    app.connect("autodoc-process-bases", drop_generic_bases)  # type: ignore[attr-defined]
    app.connect("builder-inited", warn_without_local_mathjax)  # type: ignore[attr-defined]
