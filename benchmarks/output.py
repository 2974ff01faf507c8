"""Write a run's files: JSON (with the ratio summary), text tables, reStructuredText, PNG plots."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .report import rst_report, text_report
from .results import RunResults
from .summary import Ratio

JSON_NAME, TEXT_NAME, RST_NAME = "results.json", "results.txt", "results.rst"


def write_outputs(run: RunResults, ratios: Sequence[Ratio], folder: str,
                  plots: bool = True) -> dict[str, str]:
    """Write every output into ``folder`` (created if needed); returns kind -> path."""
    os.makedirs(folder, exist_ok=True)
    paths = {kind: os.path.join(folder, name)
             for kind, name in (("json", JSON_NAME), ("text", TEXT_NAME), ("rst", RST_NAME))}
    run.save(paths["json"], extra={"summary": [ratio.to_dict() for ratio in ratios]})
    images = {}
    if plots:
        from .plots import write_plots  # matplotlib is imported only when plots are drawn

        images = write_plots(run, folder)
        for names in images.values():
            for name in names:
                paths[name] = os.path.join(folder, name)
    with open(paths["text"], "w", encoding="utf-8") as out:
        out.write(text_report(run, ratios))
    with open(paths["rst"], "w", encoding="utf-8") as out:
        out.write(rst_report(run, ratios, images))
    return paths
