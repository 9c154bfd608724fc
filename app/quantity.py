"""Kubernetes resource quantities: parse to Decimal, format back canonically.

Only what the operator needs: whole-card counts, CPU, memory and storage arithmetic.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))((?:[KMGTPE]i)|[numkMGTPE]|(?:[eE][+-]?\d+))?$")


class QuantityError(ValueError):
    pass


# The largest magnitude a Kubernetes quantity holds in its canonical form (an int64 of its unit);
# beyond it the number cannot be rendered back (e.g. "1e999999" passes the CRD's pattern).
LIMIT = Decimal(2**63 - 1)
_MAX_EXPONENT = 30


def unrepresentable(value: int | str) -> str | None:
    """Why a quantity cannot be represented (too large), or None. Text that is not a quantity at
    all is not judged here (the CRD pattern and the rules that parse it say so)."""
    try:
        amount = parse(value)
    except QuantityError as exc:
        return str(exc) if "larger than" in str(exc) else None
    if abs(amount) > LIMIT:
        return f"{value!r} is larger than a Kubernetes quantity can hold (at most 2^63-1 of its unit)"
    return None


def parse(value: int | str | float | None) -> Decimal:
    """A quantity as a Decimal (`"16Gi"` -> 17179869184, `"500m"` -> 0.5)."""
    if value is None:
        raise QuantityError("no quantity")
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        if isinstance(value, int) and abs(value) > LIMIT:
            raise QuantityError(f"{value!r} is larger than a Kubernetes quantity can hold (at most 2^63-1 of its unit)")
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise QuantityError(f"{value!r} is not a Kubernetes quantity") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    exponent = int(suffix[1:])
    if exponent > _MAX_EXPONENT:
        raise QuantityError(f"{value!r} is larger than a Kubernetes quantity can hold (at most 2^63-1 of its unit)")
    return base * (Decimal(10) ** max(exponent, -_MAX_EXPONENT))


def multiplier(value: int | str | float | None) -> str | None:
    """The suffix of a quantity string that multiplies it by 1000 or more (`Gi`, `k`, `e3`), or None:
    right for bytes, wrong for a count (`accelerator: 2Gi` is 2,147,483,648 cards)."""
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    suffix = match.group(2) if match else None
    if suffix is None or suffix in ("n", "u", "m"):
        return None
    if suffix[0] in "eE" and int(suffix[1:]) < 3:
        return None
    return suffix


def whole(value: int | str | None) -> int | None:
    """The integer a quantity denotes, or None when it is not a whole number."""
    amount = parse(value)
    if amount != amount.to_integral_value():
        return None
    return int(amount)


def cpu(amount: Decimal) -> str:
    """CPU in millicores when fractional, whole cores otherwise (rounded up to a millicore)."""
    millis = (amount * 1000).to_integral_value(rounding=ROUND_CEILING)
    if millis % 1000 == 0:
        return str(int(millis // 1000))
    return f"{int(millis)}m"


def memory(amount: Decimal) -> str:
    """Bytes in the largest binary unit that divides them exactly (rounded up to Mi when fractional)."""
    amount = amount.to_integral_value(rounding=ROUND_CEILING)
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if amount % unit == 0:
            return f"{int(amount // unit)}{suffix}"
    mib = (amount / _BINARY["Mi"]).to_integral_value(rounding=ROUND_CEILING)
    return f"{int(mib)}Mi"
