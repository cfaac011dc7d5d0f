"""plot.png: tokens/s against concurrency (left) and against context depth (right), generation solid and prompt
processing dashed, one line per depth (left) or concurrency (right). matplotlib (the `bench` extra), no display."""

from __future__ import annotations

from pathlib import Path

from generator.bench.results import BenchRun


def plot(runs: list[BenchRun], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt

    fig, (by_conc, by_depth) = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = ((by_conc, "concurrency", "depth"), (by_depth, "depth", "concurrency"))
    for ax, x_name, line_name in panels:
        for (pp, tg, other) in sorted({(r.pp, r.tg, getattr(r, line_name)) for r in runs}):
            points = sorted((getattr(r, x_name), r) for r in runs
                            if (r.pp, r.tg, getattr(r, line_name)) == (pp, tg, other))
            xs = [x for x, _ in points]
            label = f"pp{pp} tg{tg} {line_name} {other}"
            tg_line = ax.plot(xs, [r.tg_tps or 0 for _, r in points], marker="o", label=f"{label}: generation")
            ax.plot(xs, [r.pp_tps or 0 for _, r in points], marker="s", linestyle="--",
                    color=tg_line[0].get_color(), label=f"{label}: prompt")
        ax.set_xlabel(x_name)
        ax.set_ylabel("tokens/s")
        ax.set_yscale("symlog")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    by_conc.set_title("against concurrency")
    by_depth.set_title("against context depth")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
