"""`aisys drill`, as a job seeker uses it: in a terminal and in JupyterLab, on a fresh history, with broken attempts,
and killed half-way. Each test keeps its history in a temporary folder (AISYS_DATA_DIR)."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest

from aisys.drill import bank, cli, grading, schedule
from aisys.drill.card import all_cards
from aisys.drill.store import DATA_ENV, History
from aisys_grader.exercise import find

AISYS = [str(Path(sys.executable).parent / "aisys"), "drill"]
DRILL = "iou"


def solution() -> str:
    """The drill's solution cell, as a learner would write it in the file `next` wrote."""
    return cli.files.solution(bank.find_item(DRILL))


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "data"


def drill(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([*AISYS, *args], capture_output=True, text=True, timeout=300)
    if check is not None:
        assert done.returncode == check, f"aisys drill {' '.join(args)}: {done.returncode}\n{done.stdout}{done.stderr}"
    return done


# -- the bank ---------------------------------------------------------------------------------------------------------
def test_the_bank_holds_at_least_30_coding_problems_and_80_cards():
    code = [i for i in bank.items().values() if i.kind == "code"]
    problems = {find(i.exercise).spec.drill.problem for i in code}
    assert len(problems) >= 30, f"{len(problems)} coding problems: {sorted(problems)}"
    assert len(all_cards()) >= 80


@pytest.mark.parametrize("item", [i for i in bank.items().values() if i.kind == "code"], ids=lambda i: i.id)
def test_every_drill_has_one_cell_to_write_a_hint_ladder_and_a_file_to_start_from(item):
    assert len(grading.solution_cells(grading.handout(item))) == 1, "a drill is answered in exactly one cell"
    assert len(find(item.exercise).spec.drill.hints) >= 2
    scaffold = cli.files.python_file(item)
    compile(scaffold, "scaffold", "exec")  # the file `next` writes is Python as it stands
    assert "NotImplementedError" in scaffold and "checker(" not in scaffold


def test_an_unknown_item_is_an_error_naming_the_nearest(data):
    done = drill("check", "iuo", check=2)
    assert "no item 'iuo'" in done.stderr and "iou" in done.stderr and "Traceback" not in done.stderr


# -- a terminal session: next, check (fail, then pass), hints, stats, export and import --------------------------------
@pytest.mark.slow
def test_next_check_hint_stats_export_import_in_a_terminal(data, tmp_path):
    listed = drill("list", "--kind", "code").stdout
    assert f"\n{DRILL} " in listed and "coding drills and 0 cards" in listed

    taken = drill("next", DRILL).stdout
    attempt = tmp_path / f"drill_{DRILL}.py"
    assert attempt.is_file() and "clock started" in taken

    failed = drill("check", DRILL, check=1).stdout
    assert "failed (0 of" in failed and "not implemented yet" in failed and "the clock runs" in failed
    assert "hint 1 of" in drill("hint", DRILL).stdout
    assert "hint 2 of" in drill("hint", DRILL).stdout

    attempt.write_text(solution())
    passed = drill("check", DRILL).stdout
    assert "passed (" in passed and "2 hints: rated Hard" in passed  # a quick pass, lowered two steps by the hints

    with History(data) as history:
        [closed] = history.attempts(DRILL)
        assert closed.passed and closed.hints == 2 and closed.rating == schedule.Rating.Hard
        assert [c.passed for c in history.checks(closed.id)] == [False, True]
        assert "not implemented yet" in history.checks(closed.id)[0].failing
        schedule_here = history.schedule_of()

    stats = drill("stats", "--plot", "times.png").stdout
    assert "1 attempts closed (1 passed)" in stats and (tmp_path / "times.png").stat().st_size > 1000

    drill("export", "history.json")
    os.environ[DATA_ENV] = str(tmp_path / "elsewhere")
    try:
        assert "1 attempts" in drill("import", "history.json").stdout
        drill("import", "history.json")  # twice: nothing is added again
        with History(tmp_path / "elsewhere") as elsewhere:
            assert len(elsewhere.attempts()) == 1 and elsewhere.schedule_of() == schedule_here
    finally:
        os.environ[DATA_ENV] = str(data)


def test_a_card_is_answered_once_and_explained(data):
    card = next(c for c in all_cards().values() if c.ask.answer.__class__.__name__ == "Choice")
    wrong = "abcdefghij"[(card.ask.answer.answer + 1) % len(card.ask.answer.options)]
    done = drill("check", card.id, "--answer", wrong, check=1).stdout
    assert "wrong: the answer is" in done and card.ask.explanation[:40] in done and "rated Again" in done
    with History(data) as history:
        [attempt] = history.attempts(card.id)
        assert attempt.passed is False and history.open_attempt(card.id) is None


def test_import_refuses_what_is_not_an_export(data, tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"format": "something else"}))
    assert "expected an export" in drill("import", "x.json", check=2).stderr
    (tmp_path / "y.json").write_text("{not json")
    assert "is not JSON" in drill("import", "y.json", check=2).stderr


# -- JupyterLab: the same from a notebook ---------------------------------------------------------------------------
@pytest.mark.slow
def test_the_magic_takes_checks_and_records_in_a_kernel(data):
    from nbclient import NotebookClient

    cells = ["%load_ext aisys.drill", f"%drill next {DRILL}", f"%%drill {DRILL}\n{solution()}", "%drill stats"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    said = ["".join(o.get("text", "") for o in c.outputs) for c in notebook.cells]
    assert "the clock runs" in said[1]
    assert f"{DRILL}: passed" in said[2] and "recorded:" in said[2]
    assert "1 attempts closed (1 passed)" in said[3]
    with History(data) as history:
        assert [a.passed for a in history.attempts(DRILL)] == [True]


# -- bad attempts: a clear message and a recorded fail, never a crash -------------------------------------------------
BAD = {
    "does_not_parse": ("def box_iou(a, b:\n    pass\n", "your code raised SyntaxError"),
    "hangs": ("def box_iou(a, b):\n    while True:\n        pass\n", "did not return within"),
    "prints_megabytes": ("import numpy as np\ndef box_iou(a, b):\n    print('x' * 5_000_000)\n"
                         "    return np.zeros((len(a), len(b)))\n", "elements differ"),
    "wrong_type": ("def box_iou(a, b):\n    return 'boxes'\n", "box_iou"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", BAD)
def test_a_broken_attempt_is_a_recorded_fail_with_a_message(data, tmp_path, monkeypatch, capsys, name):
    monkeypatch.setattr(grading, "TIMEOUTS", dict(cell=10, call=3, notebook=30))
    code, says = BAD[name]
    (tmp_path / "attempt.py").write_text(code)
    assert cli.main(["check", DRILL, "attempt.py"]) == 1
    out = capsys.readouterr().out
    assert f"{DRILL}: failed" in out and says in out and len(out) < 10_000, out[:3000]
    with History(data) as history:
        [check] = history.checks()
        assert not check.passed and check.failing


# -- killed half-way: the history stays whole -------------------------------------------------------------------------
@pytest.mark.slow
def test_a_check_killed_half_way_leaves_the_history_consistent(data, tmp_path):
    drill("next", DRILL)
    (tmp_path / f"drill_{DRILL}.py").write_text("import time\ntime.sleep(120)\n")
    check = subprocess.Popen([*AISYS, "check", DRILL], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(6)
    assert check.poll() is None, "the check ended before it could be killed half-way"
    check.send_signal(signal.SIGKILL)
    check.wait(timeout=30)
    with History(data) as history:
        assert history.integrity() == []
        [attempt] = history.attempts(DRILL)
        assert attempt.ended is None and history.checks() == []  # nothing half-recorded; the clock still runs
    (tmp_path / f"drill_{DRILL}.py").write_text(solution())
    assert "passed" in drill("check", DRILL).stdout  # and the next check carries on from there


KILLED_WRITER = """
import sys, time
from aisys.drill.store import History
with History(sys.argv[1]) as history:
    n = 0
    while True:
        item = f"item{n % 7}"
        history.use_hint(item, "code", 15, time.time())
        history.record_check(item, "code", 15, time.time(), passed=n % 3 == 0, failing="case")
        n += 1
"""


def test_a_writer_killed_at_any_moment_leaves_every_attempt_whole(tmp_path):
    for delay in (0.3, 0.45, 0.6, 0.75, 0.9):
        writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)])
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    with History(tmp_path) as history:
        assert history.integrity() == []
        for attempt in history.attempts():
            checks = history.checks(attempt.id)
            # a closed attempt was closed by the passing check recorded in the same transaction, never apart from it
            assert (attempt.ended is not None) == any(c.passed for c in checks)
        assert history.schedule_of()  # the schedule replays from what is there
    with sqlite3.connect(tmp_path / "drills.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM attempts WHERE ended IS NULL GROUP BY item HAVING count(*) > 1"
                          ).fetchall() == []


# -- scheduling -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("passed, minutes, hints, rated", [
    (False, 1, 0, "Again"), (True, 5, 0, "Easy"), (True, 10, 0, "Good"), (True, 20, 0, "Hard"),
    (True, 5, 1, "Good"), (True, 10, 2, "Again"), (True, 20, 5, "Again")])
def test_the_rating_comes_from_pass_time_against_budget_and_hints(passed, minutes, hints, rated):
    assert schedule.rating(passed, 60 * minutes, 15, hints).name == rated


def test_next_takes_the_most_overdue_then_the_most_asked_new_item(tmp_path):
    items = [bank.Item(f"i{k}", "card", "t", "architecture", d, f, None, None)
             for k, (d, f) in enumerate([("easy", "low"), ("hard", "high"), ("easy", "high"), ("easy", "medium")])]
    start = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    with History(tmp_path) as history:
        assert cli.pick(items, history, schedule.now()).id == "i2"  # new: most asked, then easiest
        history.record_check("i2", "card", 2, start, passed=True, close=True)
        history.record_check("i3", "card", 2, start + 60, passed=False, close=True)
        later = datetime.fromtimestamp(start, timezone.utc) + timedelta(days=400)
        assert cli.pick(items, history, later).id == "i3"  # both due: the failed one is the more overdue
        soon = datetime.fromtimestamp(start, timezone.utc) + timedelta(seconds=1)
        assert cli.pick(items, history, soon).id == "i1"  # nothing due yet: a new one


def test_a_mock_interview_keeps_one_clock_and_scores_what_passed_in_time(data, tmp_path):
    started = drill("mock", "-n", "3", "--topic", "attention", "--minutes", "30").stdout
    assert "mock interview: 3 items, 30 min for all" in started
    with History(data) as history:
        [mock] = history.mocks()
        code = [i for i in mock.items if bank.find_item(i).kind == "code"]
        cards = [i for i in mock.items if bank.find_item(i).kind == "card"]
        assert code and cards, "a mock mixes coding drills and cards"
        assert all((tmp_path / "mock" / f"drill_{i}.py").is_file() for i in code)
    card = bank.find_item(cards[0]).card
    drill("check", card.id, "--answer", str(card.ask.answer.value) if hasattr(card.ask.answer, "value")
          else " ".join("abcdefghij"[i] for i in getattr(card.ask.answer, "answers", [getattr(card.ask.answer,
                                                                                          "answer", 0)])))
    status = drill("mock", "--status").stdout
    assert "left" in status and f"{card.id}" in status and "1 of 3 within the time limit" in status
    ended = drill("mock", "--end").stdout
    assert "1 of 3 within the time limit" in ended and "failed" in ended
    with History(data) as history:
        assert all(history.open_attempt(i) is None for i in mock.items)
