"""The driver's seconds of work per trial (hpsearch.driver.bookkeeping): one float a trial,
summed over its launch and its finalize, iterated as (trial id, seconds) for the trials that
have any, as benchmarks/overhead.py and scale.py read it."""

from hpsearch.driver.bookkeeping import Bookkeeping


def test_each_trial_s_launch_and_finalize_add_up_and_untouched_ids_are_left_out():
    kept = Bookkeeping()
    kept.add(0, 0.25)
    kept.add(3, 0.5)
    kept.add(0, 0.125)  # its finalize
    kept.add(2, 0.0)  # recorded, if only 0 s
    assert list(kept) == [(0, 0.375), (2, 0.0), (3, 0.5)]
    assert kept.seconds.itemsize * len(kept.seconds) == 8 * 4  # one double a trial
