"""`bench --compare`: the recipe's last two runs side by side, test by test, with the ratio new / old of each
figure, and a mark where it got worse by more than REGRESSION (tokens/s down, time to first token up)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator.bench.results import BenchRun, load, run_folders

REGRESSION = 0.10  # a tenth worse: beyond run-to-run noise on a quiet machine
FIGURES = ("pp_tps", "tg_tps", "ttft_ms")
LOWER_IS_BETTER = {"ttft_ms"}


@dataclass(frozen=True)
class Row:
    key: tuple[int, int, int, int]  # pp, tg, depth, concurrency
    old: dict[str, float | None]
    new: dict[str, float | None]

    def ratio(self, figure: str) -> float | None:
        old, new = self.old.get(figure), self.new.get(figure)
        return new / old if old and new is not None else None

    def worse(self, figure: str) -> bool:
        r = self.ratio(figure)
        if r is None:
            return False
        return r > 1 + REGRESSION if figure in LOWER_IS_BETTER else r < 1 - REGRESSION

    @property
    def regressed(self) -> bool:
        return any(self.worse(f) for f in FIGURES)


@dataclass(frozen=True)
class Comparison:
    old: Path
    new: Path
    rows: list[Row]


def compare(root: Path) -> Comparison | None:
    """The last two runs under root (bench/<recipe>), or None when there are fewer."""
    folders = run_folders(root)
    if len(folders) < 2:
        return None
    (old_runs, _), (new_runs, _) = load(folders[-2]), load(folders[-1])

    def figures(run: BenchRun | None) -> dict[str, float | None]:
        return {f: getattr(run, f) if run else None for f in FIGURES}

    old_by, new_by = {r.key: r for r in old_runs}, {r.key: r for r in new_runs}
    keys = list(dict.fromkeys([*new_by, *old_by]))
    return Comparison(folders[-2], folders[-1], [Row(k, figures(old_by.get(k)), figures(new_by.get(k)))
                                                 for k in keys])
