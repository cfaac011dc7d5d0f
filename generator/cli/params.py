"""Option checks click's own ranges miss, as callbacks (usage errors naming the option, given before anything
runs): a number of seconds must be finite (FloatRange lets `nan` and `inf` through: `nan` compares false with
every bound, and made the lock wait a busy loop), and a list of llama-benchy counts (`--pp 512,2048`) holds
only values llama-benchy can run."""

from __future__ import annotations

import math
import re
import threading
from typing import Callable

import click

Check = Callable[[click.Context, click.Parameter, object], object]


def seconds(least: float = 0.0, open_: bool = False) -> Check:
    """Seconds: a finite number, at least `least` (more than it when `open_`), and at most what a thread can wait
    (threading.TIMEOUT_MAX: beyond it the wait itself fails). None (not given) passes."""

    def check(ctx: click.Context, param: click.Parameter, value: object) -> float | None:
        if value is None:
            return None
        try:
            number = float(str(value))
        except ValueError:
            raise click.BadParameter(f"{value!r} is not a number of seconds", ctx, param) from None
        low = number <= least if open_ else number < least
        if not math.isfinite(number) or low or number > threading.TIMEOUT_MAX:
            bound = f"more than {least:g}" if open_ else f"at least {least:g}"
            raise click.BadParameter(f"{value} is not a finite number of seconds {bound} and at most "
                                     f"{threading.TIMEOUT_MAX:.0f}", ctx, param)
        return number

    return check


def counts(least: int, most: int) -> Check:
    """Whole numbers within [least, most], separated by commas or spaces, the option repeated or not (`--pp
    512,2048`, `--pp 512 --pp 2048`; llama-benchy's own `--pp 512 2048` does not fit click). None when not given."""

    def check(ctx: click.Context, param: click.Parameter, value: object) -> tuple[int, ...] | None:
        given = value if isinstance(value, tuple) else ()
        words = [w for v in given for w in re.split(r"[,\s]+", str(v).strip()) if w]
        if not words:
            return None
        if not all(re.fullmatch(r"[+-]?[0-9]+", w) for w in words):
            raise click.BadParameter(f"{' '.join(map(str, given))}: whole numbers, separated by commas", ctx, param)
        numbers = tuple(int(w) for w in words)
        for n in numbers:
            if not least <= n <= most:
                raise click.BadParameter(f"{n} is out of range: from {least} to {most}", ctx, param)
        return numbers

    return check
