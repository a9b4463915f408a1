"""Chunks lose their index of steps: one index entry fewer for each of the many chunks a step
appends (a model's every delta), against a scan of one stream's chunks in the rare reads by
step (`cleanup_to_step` after a dead attempt or before a model call's retry,
`get_chunks_from_step`)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("streams_app", "0003_stream_room_for_hot_updates")]

    operations = [migrations.RemoveIndex(model_name="streamchunk", name="chunk_stream_step")]
