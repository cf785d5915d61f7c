"""Sphinx configuration: the user pages of docs/*.md and an API reference generated from the docstrings of `lab`.

Build with ``.venv/bin/sphinx-build -W --keep-going -b html docs docs/build/html``. The API reference lists every
module the package holds when the site is built (autosummary, recursive over ``lab``), so no module is named here;
every cross-reference must resolve (``nitpicky``), except those into third-party packages, which are not built here
and, offline, cannot be linked.
"""

import inspect
import sys
from pathlib import Path

from sphinx.ext.napoleon.docstring import GoogleDocstring

import lab

DOCS = Path(__file__).resolve().parent
GENERATED = DOCS / "api"  # the API reference's pages, written by each build (docs/api/.gitignore)

project = "Residual Lab"
author = "Residual Lab authors"
release = version = lab.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = ["_templates"]
exclude_patterns = ["build"]  # where the README builds the site (ignored by git)
root_doc = "index"

# The API reference: a page per module, each member documented once, in the module that defines it (a package's
# `__all__` re-exports are not documented again); private members too, since the docstrings refer to them.
autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": True, "private-members": True,
                           "ignore-module-all": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False  # an override says what it adds, or nothing: torch's `forward` is torch's
autodoc_preserve_defaults = True  # a default shows as written (`CHECKPOINT_S`), not as its value
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# A section's text before a colon is prose, not a type to link: the types are the signatures' annotations.
napoleon_use_rtype = False
napoleon_use_param = False
napoleon_use_ivar = True  # a dataclass's `Attributes:` section describes the fields autodoc documents

# the user pages: `[text](page.md#heading)` links between them
myst_heading_anchors = 3

# Every reference must resolve; those into packages the lab uses resolve nowhere offline, so they are let through,
# by package: a reference to `lab.…` that does not resolve is an error.
nitpicky = True
_THIRD_PARTY = ("torch", "torchvision", "numpy", "np", "scipy", "pandas", "sklearn", "yaml", "PIL", "tqdm", "timm",
                "bokeh", "panel", "pn", "holoviews", "hv", "param", "tornado", "IPython", "pyviz_comms", "diffusers",
                "torchmetrics", "torch_fidelity", "submitit", "umap", "tensorboard", "psutil")
_IGNORED = {*_THIRD_PARTY, *sys.stdlib_module_names}
nitpick_ignore_regex = [(r"py:.*", rf"{package}(\..+)?") for package in sorted(_IGNORED)]

try:
    import param
    from panel.custom import ReactiveESM

    _PARAM_NAMES = {*vars(param.Parameterized), *vars(param.Parameter), *param.Parameter.__slots__,
                    *vars(ReactiveESM)}
except ImportError:  # the pages' extra is not installed: no Parameterized class is documented either
    _PARAM_NAMES = set()

html_theme = "alabaster"
html_title = "Residual Lab"


def _clear_generated(app) -> None:
    """Removes the API pages of the previous build, so that a module moved or removed leaves no page behind."""
    for path in GENERATED.glob("*.rst"):
        path.unlink()


def _prose(self) -> list[str]:
    return self._consume_to_end()


# The lab's attribute and constant docstrings are prose, not napoleon's `type: description`.
GoogleDocstring._parse_attribute_docstring = _prose


def _skip_param_machinery(app, what, name, obj, skip, options) -> bool | None:
    """Skips what param puts in every Parameter and Parameterized class (`param`, `_param__private`, slots): param's
    own members, not the lab's; and name-mangled attributes, which cannot be read under the name they are listed by.
    """
    mangled = name.startswith("__") and not name.endswith("__")
    from_param = name in _PARAM_NAMES and not getattr(obj, "__module__", "").startswith("lab.")
    return True if mangled or from_param else None


def _factory_default(app, what, name, obj, options, signature, return_annotation):
    """Writes a dataclass field's `default_factory` default, which Python shows as `<factory>`, as an expression:
    Sphinx cannot parse `<factory>`, and a signature it cannot parse loses its annotations' links."""
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "field(...)"), return_annotation
    return None


def _python_name(app, env, node, contnode):
    """Resolves a reference that names no documented object as Python resolves the name where it is written.

    Three kinds of name Python finds and autodoc documents under another name or not at all: a name imported into
    the module (``:class:`Run``` where ``Run`` is imported, an annotation Python could not evaluate, such as a
    NamedTuple's field ``Tensor``), a method a class inherits (``:meth:`resume``` of a job) and a module constant
    without a docstring (``:data:`SCHEDULES```). Each links to where it is defined (a constant: to its module's page);
    a third party's is left unlinked like every other reference into a third-party package. A name Python does not
    find where it is written stays an error.
    """
    if node.get("refdomain") != "py":
        return None
    target, module, cls = node["reftarget"], node.get("py:module"), node.get("py:class")
    candidates = [f"{module}.{cls}.{target}"] if module and cls else []
    candidates += [f"{module}.{target}"] if module else []
    documented = _find(f"{module}.{cls or _signature_name(node)}")  # a class: the modules of its bases too
    if documented is not None and isinstance(documented[0], type):
        candidates += [f"{base.__module__}.{target}" for base in documented[0].__mro__[1:]]
    for dotted in [*candidates, target]:
        found = _find(dotted)
        if found is None:
            continue
        obj, where = found
        home, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if inspect.ismodule(obj):
            reftype, name = "mod", obj.__name__
        elif isinstance(home, str) and isinstance(qualname, str) and "<" not in qualname:
            if home.split(".")[0] != "lab":
                return contnode if home.split(".")[0] in _IGNORED else None
            reftype, name = "obj", f"{home}.{qualname}"
        else:  # a value: its module documents it
            reftype, name = "mod", where
        return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder, reftype, name, node, contnode)
    return None


def _find(dotted: str) -> tuple[object, str] | None:
    """The object a dotted ``lab.…`` name is bound to, and the module it is bound in; None where there is none."""
    parts = dotted.split(".")
    if parts[0] != "lab":
        return None
    for split in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:split]))
        if module is None:
            continue
        obj = module
        for part in parts[split:]:
            obj = getattr(obj, part, _MISSING)
            if obj is _MISSING:
                return None
        return obj, module.__name__
    return None


_MISSING = object()


def _signature_name(node) -> str:
    """The name of the object whose signature holds ``node`` ("" outside a signature)."""
    while node is not None and node.tagname != "desc_signature":
        node = node.parent
    return "" if node is None else node.get("fullname", "")


def _made_bases(app, name, obj, options, bases: list) -> None:
    """Shows a base class made at run time (:func:`lab.ui.pages.knobs.knob_class`), which no module names and so no
    page documents, as the bases it was made from."""
    for i in reversed(range(len(bases))):
        base = bases[i]
        module = sys.modules.get(getattr(base, "__module__", ""))
        if isinstance(base, type) and module is not None and module.__name__.split(".")[0] == "lab" \
                and getattr(module, base.__qualname__, None) is not base and "." not in base.__qualname__:
            bases[i:i + 1] = list(base.__bases__)


def setup(app) -> None:
    app.connect("autodoc-process-bases", _made_bases)
    app.connect("autodoc-process-signature", _factory_default)
    app.connect("missing-reference", _python_name)
    app.connect("autodoc-skip-member", _skip_param_machinery)
    app.connect("builder-inited", _clear_generated, priority=100)  # before autosummary writes this build's pages
