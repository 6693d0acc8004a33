"""The course's site (`make site`): Sphinx with MyST-NB and the book theme, built from PyPI alone.

`helpers.commands.site` lays the sources out the way the repository does (the README as the front
page, `docs/`, the executed `notebooks/`, `helpers/README.md`), so every link that works on the
repository works on the site; this file is copied beside them. Jupyter Book 2's themes are
downloaded from GitHub when a site is built, which a machine that reaches only the package
registries (and many compute nodes) cannot do; Sphinx, MyST-NB and the book theme Jupyter Book 1
used come from PyPI and read the same MyST markdown and notebooks.
"""

project = "Data-parallel TensorFlow on HPC"
author = "the course's authors"
copyright = "the course's authors"  # noqa: A001 - Sphinx's name

extensions = ["myst_nb"]
# the notebooks were executed by `make course` (or the test suite): the site shows those outputs
nb_execution_mode = "off"
# notebooks whose code is not Python 3 as Pygments knows it (%%px cells) still highlight
nb_render_markdown_format = "myst"
myst_heading_anchors = 3  # `[text](slurm.md#engines-from-a-shell)` as on GitHub
myst_enable_extensions = ["colon_fence", "dollarmath"]
exclude_patterns = ["_build", "conf.py", "**/.ipynb_checkpoints"]
suppress_warnings = ["misc.highlighting_failure", "myst.header"]

html_theme = "sphinx_book_theme"
html_title = "Data-parallel TensorFlow on HPC"
html_theme_options = {
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "use_download_button": True,
}
html_copy_source = True  # the download button offers each page: the scrubbed copy of an executed notebook
