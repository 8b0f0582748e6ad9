"""The CPU partition between the link delayer and the hosts: parsing and checks."""

from __future__ import annotations

import pytest

from testbed.emulation.cpu_partition import Partition, cpu_list, parse_cpu_list, partition

FOUR = frozenset(range(4))


def test_cpu_lists_parse_and_print_as_the_kernel_writes_them() -> None:
    assert parse_cpu_list("3") == {3}
    assert parse_cpu_list(" 0-2,5 ") == {0, 1, 2, 5}
    assert cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert cpu_list(parse_cpu_list("1,3-4")) == "1,3-4"


@pytest.mark.parametrize("text", ["x", "1,", "2-1", "-1", "1-", "0.5"])
def test_a_malformed_cpu_list_is_refused_naming_the_field_and_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"^TESTBED_SHAPER_CPUS: expected a CPU list such "
                                         r"as '1', '2-3' or '0,2'"):
        partition(text, available=FOUR)


def test_the_hosts_get_every_usable_cpu_the_delayer_does_not() -> None:
    split = partition("3", available=FOUR)
    assert split == Partition(frozenset({3}), frozenset({0, 1, 2}))
    assert split.as_dict() == {"shaper": [3], "hosts": [0, 1, 2]}
    assert split.hosts_list == "0-2"
    assert partition(None, available=FOUR) is None
    assert partition("  ", available=FOUR) is None


def test_a_partition_must_use_usable_cpus_and_leave_one_to_the_hosts() -> None:
    with pytest.raises(ValueError, match=r"^--cpus: CPU 4-5 is not one this process may use "
                                         r"\(usable: 0-3\)$"):
        partition("3-5", "--cpus", available=FOUR)
    with pytest.raises(ValueError, match=r"leaves no CPU for the hosts \(usable: 0-3\)"):
        partition("0-3", available=FOUR)
