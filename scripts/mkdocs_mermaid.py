"""A mkdocs hook: the site serves its own copy of mermaid, so the diagrams draw with no network.

A ```` ```mermaid ```` block becomes ``<pre class="mermaid">`` (pymdownx.superfences' custom
fence in mkdocs.yml), which Material for MkDocs draws with the page's colours, in light and dark
mode alike. Material takes the global ``mermaid`` if a script defined it first, and fetches it
from a CDN otherwise. This hook gives it the first: it copies ``dist/mermaid.min.js`` of the npm
package that ``make mermaid`` unpacks into .cache/ to ``javascripts/mermaid.min.js`` of the built
site (with its licence), and loads it, just before Material's own script, on the pages that
have a diagram (3.5 MB, which the other pages do not pay for).

The build fails when the package is missing: a site whose diagrams would be raw text or would
reach for a CDN is not built.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".cache/mermaid/package/dist/mermaid.min.js"
LICENSE = ROOT / ".cache/mermaid/package/LICENSE"
#: Where the built site serves it, and its licence (MIT).
SERVED = "javascripts/mermaid.min.js"
SERVED_LICENSE = "javascripts/mermaid.LICENSE.txt"
#: What a page with a diagram contains, and the tag that loads Material's script.
DIAGRAM = '<pre class="mermaid">'
BUNDLE = re.compile(r'<script src="[^"]*assets/javascripts/bundle\.')


def on_config(config: Any) -> Any:
    """Stop the build at once when mermaid is not installed."""
    if not SCRIPT.is_file():
        raise PluginError(
            f"{SCRIPT} is missing: run `make mermaid` (it needs npm) to draw the docs' diagrams"
        )
    return config


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Load the local mermaid before Material's script on a page that has a diagram."""
    if DIAGRAM not in output:
        return output
    source = get_relative_url(SERVED, page.url)
    bundle = BUNDLE.search(output)
    if bundle is None:
        raise PluginError(f"{page.file.src_uri}: no Material script to load mermaid before")
    tag = f'<script src="{source}"></script>\n      '
    return output[: bundle.start()] + tag + output[bundle.start() :]


def on_post_build(config: Any) -> None:
    """Copy mermaid and its licence into the built site."""
    site = Path(config["site_dir"])
    (site / SERVED).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SCRIPT, site / SERVED)
    shutil.copyfile(LICENSE, site / SERVED_LICENSE)
