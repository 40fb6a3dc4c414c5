"""The gloo worker processes: results come back, failures come back as errors with the
failing worker's traceback, and nothing is left running or waiting afterwards."""

import multiprocessing
import os
import time

import pytest
import worker_bodies

from neuron_fabric.experiments.workers import WorkerError, launch


def _no_worker_left():
    return not multiprocessing.active_children()


def test_every_worker_runs_and_polling_drains_what_they_send():
    messages = multiprocessing.get_context("spawn").SimpleQueue()
    received = []

    def drain():
        while not messages.empty():
            received.append(messages.get())

    launch(worker_bodies.sum_ranks, workers=3, args=(messages,), poll=drain)
    assert received == [3]  # 0 + 1 + 2, sent by worker 0 as it ended
    assert _no_worker_left()


@pytest.mark.parametrize("failing", [0, 1])
def test_a_failing_worker_stops_the_ones_waiting_for_it(failing):
    started = time.monotonic()
    with pytest.raises(WorkerError) as caught:
        launch(worker_bodies.one_fails_while_the_others_wait, workers=2, args=(failing,),
               timeout_s=120)
    assert caught.value.rank == failing
    assert f"worker {failing} found a bad gradient" in str(caught.value)
    assert "ValueError" in caught.value.details  # the worker's own traceback
    assert time.monotonic() - started < 60  # stopped, not left to the limit
    assert _no_worker_left()


def test_workers_failing_together_after_a_collective_do_not_hang():
    for _ in range(3):
        with pytest.raises(WorkerError, match=r"worker [01] stops"):
            launch(worker_bodies.all_fail_after_a_collective, workers=2, timeout_s=120)
        assert _no_worker_left()


def test_a_failing_worker_leaves_without_waiting_for_its_own_clean_up():
    started = time.monotonic()
    with pytest.raises(WorkerError, match="worker 0 stops with a thread running"):
        launch(worker_bodies.fails_with_a_thread_that_never_ends, workers=2, timeout_s=60)
    assert time.monotonic() - started < 50
    assert _no_worker_left()


def test_a_killed_worker_is_reported_with_its_signal():
    with pytest.raises(WorkerError, match="SIGKILL") as caught:
        launch(worker_bodies.one_is_killed, workers=2, timeout_s=120)
    assert caught.value.rank == 1
    assert _no_worker_left()


def test_a_run_past_its_limit_is_stopped_and_named():
    started = time.monotonic()
    with pytest.raises(WorkerError, match=r"past their 10 s limit; workers \[0, 1\]"):
        launch(worker_bodies.one_never_ends, workers=2, timeout_s=10)
    assert time.monotonic() - started < 40
    assert _no_worker_left()


@pytest.mark.parametrize("timeout_s", [0, -1.5])
def test_a_limit_that_is_not_positive_is_refused(timeout_s):
    with pytest.raises(ValueError, match="timeout_s must be a positive"):
        launch(worker_bodies.sum_ranks, workers=1, args=(None,), timeout_s=timeout_s)


def test_a_bad_number_of_workers_is_refused():
    with pytest.raises(ValueError, match="workers"):
        launch(worker_bodies.sum_ranks, workers=0, args=(None,))


def test_the_oldest_traceback_names_the_cause(tmp_path):
    from neuron_fabric.experiments.workers import _first_failure

    for rank, stamp, text in ((0, 2_000, "peer gone"), (1, 1_000, "bad gradient"),
                              (2, 3_000, "peer gone")):
        path = tmp_path / f"error-{rank}.txt"
        path.write_text(text)
        os.utime(path, ns=(stamp, stamp))
    assert _first_failure(tmp_path, [0, 2], [1, None, 1]) == (1, "bad gradient")
    # A worker with no traceback, killed by a signal, comes before every traceback.
    rank, details = _first_failure(tmp_path, [0, 3], [1, None, None, -9])
    assert (rank, details) == (3, "worker 3 was killed by SIGKILL, with no traceback")
