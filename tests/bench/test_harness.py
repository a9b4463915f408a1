"""The benchmark's tables as text: columns line up whatever the metrics' names."""

from bench.harness import Row, Table


def test_a_table_s_columns_line_up_below_a_metric_longer_than_the_others():
    table = Table(
        title="Figures",
        rows=[
            Row(metric="short", orm=1.0, strict_raw=2.0),
            Row(metric="a metric whose name runs well past the rest", orm=1_000.0, strict_raw=2.5),
        ],
    )

    header, *rows = table.render().splitlines()[1:]

    assert len({len(row) for row in rows}) == 1, rows
    ours_end = header.index(table.columns[0]) + len(table.columns[0])
    assert rows[0][:ours_end].endswith(" 1.00"), rows
    assert rows[1][:ours_end].endswith(" 1,000.00"), rows
