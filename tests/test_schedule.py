"""The pipeline's schedule is declared once (hw/schedule.py): the design document's table, the
manifest and the blocks take their stages from it."""

import pathlib

from neuron_fabric.gen.verilog import manifest_header
from neuron_fabric.golden.params import PRESETS
from neuron_fabric.hw import schedule
from neuron_fabric.hw.controller import LATENCY

DESIGN = pathlib.Path(__file__).parents[1] / "docs" / "design.md"


def test_the_design_documents_pipeline_table_is_the_schedules():
    assert schedule.pipeline_table() in DESIGN.read_text(encoding="utf-8"), (
        "docs/design.md's pipeline table differs from hw/schedule.py: paste "
        "schedule.pipeline_table() in its place")


def test_the_pipeline_table_has_a_row_per_cycle_up_to_the_response():
    rows = schedule.pipeline_rows()
    assert [cycle for cycle, _, _ in rows] == list(range(schedule.LATENCY + 1))
    tiles = {cycle: text for cycle, _, text in rows}
    for word in schedule.WORDS:
        assert f"{word.name.replace('_', ' ')} in the tile" in tiles[word.arrives]


def test_the_manifest_carries_the_schedules_stages_and_words():
    header = manifest_header(PRESETS["small"], max_reads=4)
    assert header["latency_cycles"] == LATENCY == schedule.RESPONSE_STAGE
    assert header["pipeline"]["stages"] == schedule.stages()
    assert header["pipeline"]["words"]["late_word"] == {"sent": schedule.LATE_WORD_STAGE - 2,
                                                        "arrives": schedule.LATE_WORD_STAGE}


def test_each_forward_source_is_a_write_in_flight_at_the_read():
    # A word reads its row at READ_WORD_STAGE; the block RAM holds a sum from the cycle after
    # FOLD_STAGE; one word ahead is the fold loop's own choice. The bitmaps' writes in flight
    # are the same words, so what a bitmap does not show yet is forwarded in the tiles.
    in_flight = range(1, schedule.FOLD_STAGE - schedule.READ_WORD_STAGE + 1)
    assert list(schedule.FORWARD_DISTANCES) == list(in_flight)[1:]
    assert schedule.BITMAP_DISTANCES == tuple(in_flight)
    # Each source is a bit of the forward word: a copy's reset reads one bit.
    assert sorted(source.value for source in schedule.FORWARD_DISTANCES.values()) == [1, 2]
    assert schedule.Source.NONE.value == 0
