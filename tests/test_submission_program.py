"""engine.student_program takes whatever a submitted file decoded to, and never raises on it."""

import copy
import json

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adversarial import HANDOUT, SOURCE, honest
from aisys_grader.engine import _intake_note, student_program


def _answers(program) -> list[str]:
    return [c.source for c in program.cells if c.metadata.get("nbgrader", {}).get("solution")]


HONEST_ANSWERS = _answers(honest())


def _broken(change) -> dict:
    """The honest submission as plain JSON data, with `change` applied to it."""
    data = json.loads(nbformat.writes(honest()))
    change(data)
    return data


def _set_grade_id_list(data):
    data["cells"][0]["metadata"]["nbgrader"]["grade_id"] = ["cell-00"]


def _set_metadata_int(data):
    data["metadata"]["aisys"] = 7
    data["cells"][1]["metadata"] = 7


def _extra_cell_bad_nbgrader(data):
    data["cells"].insert(2, {"cell_type": "code", "source": "x = 1", "outputs": [], "execution_count": None,
                             "metadata": {"nbgrader": {"grade": "yes", "grade_id": {"a": 1}, "points": "many"}}})


def _malformed_cells(data):
    data["cells"] += [[1, 2], "cell", None, {"cell_type": "code", "source": [1, 2]}, {"cell_type": 5}]


def _source_as_lines(data):
    for cell in data["cells"]:
        if isinstance(cell.get("source"), str):
            cell["source"] = cell["source"].splitlines(keepends=True)


@pytest.mark.parametrize("change", [_set_grade_id_list, _set_metadata_int, _extra_cell_bad_nbgrader,
                                    _malformed_cells, _source_as_lines])
def test_malformed_parts_are_ignored_and_the_answers_kept(change):
    program = student_program(HANDOUT, nbformat.from_dict(_broken(change)))
    nbformat.validate(program)
    assert _answers(program) == HONEST_ANSWERS


@pytest.mark.parametrize("submission", [None, {}, {"cells": 3}, {"cells": None}, [], "text", 5])
def test_a_submission_without_cells_is_the_blank_handout(submission):
    program = student_program(HANDOUT, submission)
    assert [c.source for c in program.cells] == [c.source for c in HANDOUT.cells]


def test_a_deeply_nested_cell_is_an_extra_cell_not_an_error():
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000
    program = student_program(HANDOUT, {"cells": [{"cell_type": "code", "source": deep, "metadata": {}}]})
    assert program.cells[0].source == deep


@pytest.mark.parametrize("metadata", [7, {"aisys": 7}, {"aisys": {"note": ["x"]}}, {"aisys": {}}, None])
def test_only_a_note_in_the_intakes_own_form_is_read(metadata):
    assert _intake_note({"metadata": metadata}) == []
    assert _intake_note({"metadata": {"aisys": {"note": "not a notebook"}}}) == ["not a notebook"]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12)
KEYS = st.sampled_from(["cell_type", "source", "metadata", "nbgrader", "grade_id", "solution", "grade"])


@settings(max_examples=200, deadline=None)
@given(cells=st.lists(st.dictionaries(KEYS, JSON | st.sampled_from(["code", "x = 1", "def f(): pass"])), max_size=5))
def test_any_json_cells_give_a_valid_program(cells):
    program = student_program(HANDOUT, {"cells": copy.deepcopy(cells)})
    nbformat.validate(program)
    assert len(program.cells) >= len(SOURCE.cells)
