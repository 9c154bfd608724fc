from decimal import Decimal

import pytest

from app import quantity


@pytest.mark.parametrize(
    "raw,expected",
    [(2, Decimal(2)), ("2", Decimal(2)), ("500m", Decimal("0.5")), ("16Gi", Decimal(16 * 2**30)),
     ("1k", Decimal(1000)), ("1e3", Decimal(1000)), ("0.5", Decimal("0.5"))],
)
def test_parse(raw, expected):
    assert quantity.parse(raw) == expected


@pytest.mark.parametrize("raw", ["two", "", "1.2.3", "5Xi", True])
def test_parse_refuses_what_is_not_a_quantity(raw):
    with pytest.raises(quantity.QuantityError):
        quantity.parse(raw)


def test_whole_counts():
    assert quantity.whole("3") == 3
    assert quantity.whole("1.5") is None
    assert quantity.whole("2000m") == 2


def test_formatting():
    assert quantity.cpu(Decimal(8)) == "8"
    assert quantity.cpu(Decimal("0.5")) == "500m"
    assert quantity.memory(Decimal(32 * 2**30)) == "32Gi"
    assert quantity.memory(Decimal(16 * 2**30) / 4) == "4Gi"
    assert quantity.memory(Decimal(1000)) == "1Mi"
