"""Numbers as every table shows them."""
import pytest

from mint.reporting.numbers import delta, delta_with_interval, interval, scientific, seconds, value


@pytest.mark.parametrize("x, shown", [(0.8958333, "0.8958"), (38460.2, "38,460"), (2.8e-17, "0"), (-0.0, "0"),
                                      (12, "12"), (None, "-"), (True, "True"), ("n/a", "n/a")])
def test_a_value_reads_as_people_read_it_never_in_exponent_notation(x, shown):
    assert value(x) == shown


def test_a_value_takes_the_digits_a_table_asks_for():
    assert (value(0.5625, 3), value(0.5625)) == ("0.562", "0.5625")


@pytest.mark.parametrize("x, shown", [(0.2, "+0.2"), (-0.05, "-0.05"), (0.0, "0"), (1e-9, "0"), (12345.6, "+12,346"),
                                      (None, "-")])
def test_a_delta_carries_its_sign_unless_it_rounds_to_nothing(x, shown):
    assert delta(x) == shown


def test_an_interval_reads_low_then_high_and_is_empty_where_none_was_recorded():
    assert interval([-0.1, 0.0]) == "[-0.1, 0]" and interval(None) == "" and interval([]) == ""
    assert delta_with_interval(0.2, [0.1, 0.3]) == "+0.2 [0.1, 0.3]" and delta_with_interval(None, None) == "-"


def test_seconds_and_a_learning_rate():
    assert (seconds(41.4), seconds(None)) == ("41s", "-")
    assert (scientific(2e-4), scientific(None)) == ("2.00e-04", "-")
