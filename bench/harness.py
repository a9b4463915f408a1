"""Time implementations of one operation in rotating order and tabulate how they compare."""

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# One operation: it does its untimed setup, then returns the nanoseconds its measured part took.
Timed = Callable[[], int]


@dataclass(frozen=True, kw_only=True)
class Options:
    """How many runs each side gets, and whether to print the SQL they share."""

    iterations: int
    warmup: int
    show_sql: bool = False


def interleave(operations: Sequence[Timed], options: Options) -> list[list[int]]:
    """Run the operations once a round, rotating who goes first; return timings after warm-up."""
    timings: list[list[int]] = [[] for _ in operations]
    for round_ in range(options.warmup + options.iterations):
        start = round_ % len(operations)
        for index in [*range(start, len(operations)), *range(start)]:
            elapsed = operations[index]()
            if round_ >= options.warmup:
                timings[index].append(elapsed)
    return timings


def percentile_ms(timings: list[int], percent: int) -> float:
    """Return the `percent`-th percentile of nanosecond timings, in milliseconds."""
    return statistics.quantiles(timings, n=100, method="inclusive")[percent - 1] / 1e6


@dataclass(frozen=True, kw_only=True)
class Row:
    """One metric of the ORM and of both raw sides, which a ratio compares it with."""

    metric: str
    orm: float
    lenient_raw: float
    strict_raw: float
    higher_is_better: bool = False
    target: float | None = None
    precision: int = 2

    @property
    def lenient_ratio(self) -> float:
        """Return how many times slower the ORM is than raw psycopg set up like Django's driver."""
        return self._slowdown(self.lenient_raw)

    @property
    def strict_ratio(self) -> float:
        """Return how many times slower the ORM is than raw psycopg on its defaults."""
        return self._slowdown(self.strict_raw)

    @property
    def passed(self) -> bool:
        """Return whether the strict ratio meets the target; a row without one always passes."""
        return self.target is None or self.strict_ratio <= self.target

    def _slowdown(self, raw: float) -> float:
        """Return how many times slower the ORM is than a raw side measuring `raw`."""
        return raw / self.orm if self.higher_is_better else self.orm / raw


@dataclass(frozen=True, kw_only=True)
class Table:
    """One benchmark's rows, with notes on the SQL and work behind them."""

    title: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        """Return the table as aligned text, its notes below it."""
        lines = [
            self.title,
            f"  {'metric':<12} {'ORM':>10} {'raw (Django driver setup)':>26} {'ratio':>6} "
            f"{'raw (psycopg defaults)':>23} {'ratio':>6} {'target':>8}  result",
        ]
        for row in self.rows:
            target = "-" if row.target is None else f"<= {row.target:.2f}"
            result = "-" if row.target is None else "PASS" if row.passed else "FAIL"
            orm, lenient, strict = (
                f"{value:,.{row.precision}f}"
                for value in (row.orm, row.lenient_raw, row.strict_raw)
            )
            lines.append(
                f"  {row.metric:<12} {orm:>10} {lenient:>26} {row.lenient_ratio:>6.2f} "
                f"{strict:>23} {row.strict_ratio:>6.2f} {target:>8}  {result}"
            )
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)
