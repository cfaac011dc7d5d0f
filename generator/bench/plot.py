"""plot.png: tokens/s against concurrency (left) and against context depth (right), generation solid and prompt
processing dashed, one line per depth (left) or concurrency (right). matplotlib (the `bench` extra): its object
API (a Figure, saved through the Agg canvas), never pyplot, so no display, no global state, and importing it
can start on a thread while llama-benchy runs (`prepare`): that import is most of what `bench` adds to a run."""

from __future__ import annotations

from pathlib import Path

from generator.bench.results import BenchRun


def prepare() -> None:
    """Import what `plot` needs (about a second of CPU): the action runs it on a thread while it waits on
    llama-benchy, a child process, so the import costs no wall time of its own. Never raises: `plot` meets
    any failure again, where it is reported."""
    try:
        import matplotlib.backends.backend_agg  # noqa: F401 - what savefig draws a PNG with
        import matplotlib.figure  # noqa: F401
    except Exception:  # noqa: BLE001, S110 - a thread has no one to tell
        pass


def plot(runs: list[BenchRun], title: str, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    by_conc, by_depth = fig.subplots(1, 2)
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
    # fixed margins: tight_layout measured every label's extent, a fifth of the drawing time
    fig.subplots_adjust(left=0.065, right=0.99, bottom=0.12, top=0.86, wspace=0.2)
    fig.savefig(path, dpi=90)
