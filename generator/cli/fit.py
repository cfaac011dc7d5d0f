"""`recipegen fit RECIPE`: each rank's memory as a small table (budget, weights, overhead, KV cache, one
full-length request, headroom; generator.explain.fit_lines, which `explain` prints too) and the `fit` rules'
judgements. Formats only: the figures come from generator.check.fitreport, the judgements from
generator.check.fit."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from generator.cli.compile import cluster_option, print_diagnostics

@click.command()
@click.argument("recipe")
@cluster_option
@click.option("--config", "config", type=click.Path(path_type=Path, exists=True),
              help="The model's config.json, or a model folder (config.json and its safetensors files or index), "
                   "instead of the local Hugging Face cache.")
def fit(recipe: str, cluster_path: Path | None, config: Path | None) -> None:
    """Will RECIPE's model fit its GPUs: each rank's weights, KV cache, overhead and headroom, with the `fit`
    rules' judgements (exit 1 when a rank's weights alone do not fit)."""
    from generator.build import load_checked_cluster
    from generator.check.fit import judge
    from generator.check.fitreport import fit_report
    from generator.diagnostics import Diagnostic, Severity
    from generator.resolve.load import load_recipe
    from generator.resolve.modelfiles import NotFound
    from generator.resolve.project import Project

    project = Project.of((recipe,), cluster_path)
    cluster, warnings = load_checked_cluster(cluster_path or project.default_cluster)
    print_diagnostics(warnings)
    loaded = load_recipe(project.recipe_path(recipe), project.recipes_dir)
    report = fit_report(loaded, cluster, config)
    if isinstance(report, NotFound):  # an unknown input is said, never a failure
        hint = "; give the model's config.json or folder with --config" if report.files else ""
        print_diagnostics([Diagnostic(loaded.document.shown, None, None, "model",
                                      f"memory per rank not judged: {report.reason}{hint}", Severity.NOTE,
                                      "fit-unknown")])
        return
    from generator.explain import fit_lines

    for line in fit_lines(report):
        click.echo(line)
    found = [Diagnostic(j.origin.file or loaded.document.shown, j.origin.line, j.origin.col or 1, j.key,
                        j.message, j.severity, j.rule) for j in judge(report)]
    print_diagnostics(found)
    if any(f.is_error for f in found):
        sys.exit(1)
