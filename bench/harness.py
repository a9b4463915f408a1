"""Time implementations of one operation in rotating order and tabulate how they compare."""

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# One operation: it does its untimed setup, then returns the nanoseconds its measured part took.
Timed = Callable[[], int]


@dataclass(frozen=True, kw_only=True)
class Options:
    """How many runs each side gets, whether to print the SQL they share, and data sizes."""

    iterations: int
    warmup: int
    show_sql: bool = False
    # Stream benchmarks: timed writes per delivery side, the pause after each, and a smoke run.
    deliveries: int = 200
    pause: float = 0.02
    quick: bool = False
    # Memory benchmark: messages in the long conversation and in the search corpus.
    history_messages: int = 100_000
    search_messages: int = 1_000_000


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
    """One metric of ours and of both raw sides, which a ratio compares it with.

    The right (strict) raw side is the baseline a target is enforced against; a row without
    raw sides holds its target against our value itself (a floor if higher is better).
    """

    metric: str
    orm: float
    lenient_raw: float | None = None
    strict_raw: float | None = None
    higher_is_better: bool = False
    target: float | None = None
    precision: int = 2

    @property
    def lenient_ratio(self) -> float | None:
        """Return how many times slower we are than the left raw side."""
        return self._slowdown(self.lenient_raw)

    @property
    def strict_ratio(self) -> float | None:
        """Return how many times slower we are than the right raw side, the strict baseline."""
        return self._slowdown(self.strict_raw)

    @property
    def passed(self) -> bool:
        """Return whether the strict ratio, or our value without one, meets the target."""
        if self.target is None:
            return True
        ratio = self.strict_ratio
        if ratio is None and self.higher_is_better:
            return self.orm >= self.target
        return (self.orm if ratio is None else ratio) <= self.target

    def _slowdown(self, raw: float | None) -> float | None:
        """Return how many times slower we are than a raw side measuring `raw`."""
        if raw is None:
            return None
        return raw / self.orm if self.higher_is_better else self.orm / raw


# Our side, then the raw side set up like Django's driver, then the one on psycopg's defaults.
ORM_COLUMNS = ("ORM", "raw (Django driver setup)", "raw (psycopg defaults)")


@dataclass(frozen=True, kw_only=True)
class Table:
    """One benchmark's rows, with notes on the SQL and work behind them."""

    title: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    columns: tuple[str, str, str] = ORM_COLUMNS

    def render(self) -> str:
        """Return the table as aligned text, its notes below it."""
        widths = [max([12, *(len(row.metric) for row in self.rows)])]
        widths += [max(10, len(column) + 1) for column in self.columns]
        lines = [self.title, self._line("metric", self.columns, ("ratio", "ratio"), widths)]
        lines[-1] += f" {'target':>8}  result"
        for row in self.rows:
            values = [
                "-" if value is None else f"{value:,.{row.precision}f}"
                for value in (row.orm, row.lenient_raw, row.strict_raw)
            ]
            ratios = [
                "-" if ratio is None else f"{ratio:.2f}"
                for ratio in (row.lenient_ratio, row.strict_ratio)
            ]
            # A ratio's target, or a value's own (in the value's precision).
            digits = row.precision if row.strict_raw is None else 2
            at_least = row.higher_is_better and row.strict_raw is None
            bound = ">=" if at_least else "<="
            target = "-" if row.target is None else f"{bound} {row.target:,.{digits}f}"
            result = "-" if row.target is None else "PASS" if row.passed else "FAIL"
            lines.append(self._line(row.metric, values, ratios, widths) + f" {target:>8}  {result}")
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)

    @property
    def figure(self) -> str:
        """Return the table's title up to its first comma or parenthesis: what it measures."""
        return self.title.split(" (")[0].split(", ")[0]

    @staticmethod
    def _line(metric: str, values: Sequence[str], ratios: Sequence[str], widths: list[int]) -> str:
        """Return one aligned line: the metric, our value, then each raw value and its ratio.

        `widths` are the metric's column's, then each value's.
        """
        ours, lenient, strict = (f"{v:>{w}}" for v, w in zip(values, widths[1:], strict=True))
        return f"  {metric:<{widths[0]}} {ours} {lenient} {ratios[0]:>6} {strict} {ratios[1]:>6}"


def summary(tables: Sequence[Table], machine: str) -> str:
    """Return every figure of a run with a target or a baseline as one Markdown table."""
    lines = [
        f"Measured on {machine}.",
        "",
        "| figure | ours | baseline | ratio | target | met |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for table in tables:
        for row in table.rows:
            if row.target is None and row.strict_raw is None:
                continue
            ratio = row.strict_ratio
            bound = ">=" if row.higher_is_better and ratio is None else "<="
            target = (
                "-"
                if row.target is None
                else f"{bound} {row.target:,.{row.precision if ratio is None else 2}f}"
            )
            lines.append(
                f"| {table.figure}: {row.metric} | {row.orm:,.{row.precision}f} | "
                + ("-" if row.strict_raw is None else f"{row.strict_raw:,.{row.precision}f}")
                + f" | {'-' if ratio is None else f'{ratio:.2f}'} | {target} | "
                + ("-" if row.target is None else "yes" if row.passed else "**no**")
                + " |"
            )
    return "\n".join(lines)
