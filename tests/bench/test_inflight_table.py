"""The in-flight table holds each size's rows to the run that matches their baseline."""

import pytest
from django.db import connection

from bench.harness import Options
from bench.inflight import FloorInFlight, InFlight, _Baselines, _CpuMeter, _table
from bench.steps import Workers


def _measured() -> _CpuMeter:
    """A meter that measured an empty block (no worker, no Daphne): its text is all the table
    reads of it."""
    with _CpuMeter(Workers(processes=[], logs=[]), None, steps=1) as meter:
        pass
    return meter


def _in_flight(size: int, steps_per_second: float) -> InFlight:
    return InFlight(
        size=size,
        steps_per_second=steps_per_second,
        overheads_ms=[10.0, 20.0],
        first_delta_ns=[5_000_000, 6_000_000],
        delta_ns=[5_000_000, 7_000_000],
        peak_connections=30,
        idle_rss_kb=[150_000, 150_000],
        peak_rss_kb=[160_000, 160_000],
        resumes=0,
        starting_seconds=1.0,
        cpu=_measured(),
    )


def test_rows_held_to_figures_measured_with_no_client_take_the_run_with_no_client():
    followed, unfollowed = _in_flight(500, 110.0), _in_flight(500, 120.0)
    baselines = _Baselines(
        saturation_cpu=_measured(),
        at_once=150.0,
        at_once_cpu=_measured(),
        saturations=[200.0, 200.0],
        floor_saturations=[180.0, 180.0],
        hop_floor_saturations=[90.0, 90.0],
    )
    floor = FloorInFlight(steps_per_second=100.0, starting_seconds=0.5, cpu=_measured())
    hop_floor = FloorInFlight(steps_per_second=80.0, starting_seconds=0.5, cpu=_measured())

    table = _table(
        [followed], [unfollowed], [floor], [hop_floor], baselines, Options(iterations=1, warmup=0)
    )

    rows = {row.metric: row for row in table.rows}
    assert rows["N=500: steps/s vs saturation, no client"].orm == 120.0
    assert rows["N=500: steps/s vs saturation, no client"].strict_raw == 200.0
    share = rows["N=500: share of saturation vs the raw floor's, neither followed"]
    assert (share.orm, share.strict_raw) == (120.0 / 200.0, 100.0 / 180.0)
    assert rows["N=500: steps/s vs the raw floor's, neither followed"].orm == 120.0
    # The target takes the floor run as ours run (no hop); the one with a hop a step is beside.
    assert share.target is not None
    hop_share = rows["N=500: share of saturation vs the floor's with a hop a step"]
    assert (hop_share.strict_raw, hop_share.target) == (80.0 / 90.0, None)
    # The followed run gives the steps/s with clients and what the clients saw.
    assert rows["N=500: steps/s, clients following"].orm == 110.0
    assert rows["N=500: overhead p99 ms"].orm == 20.0


@pytest.mark.postgres
@pytest.mark.django_db
def test_cpu_meter_charges_a_query_to_postgresql_not_to_the_benchmark():
    meter = _CpuMeter(Workers(processes=[], logs=[]), None, steps=1)
    with meter, connection.cursor() as cursor:
        # About a second of the backend's CPU, and next to none of this process's.
        cursor.execute("SELECT count(*) FROM generate_series(1, 20000000)")

    spent = dict(part.rsplit(" ", 1) for part in str(meter).split(": ", 1)[1].split(", "))
    assert float(spent["PostgreSQL"]) >= 200  # ms of the one "step"
    assert float(spent["benchmark"]) < float(spent["PostgreSQL"]) / 4
    assert float(spent["machine"]) >= float(spent["PostgreSQL"]) * 0.9
