"""Deep copies of stored API objects, which the store makes on every read, write and watch event."""

from __future__ import annotations

import pickle
from typing import TypeVar

T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy, as `copy.deepcopy` makes, about four times as fast for API objects (nested dicts and lists
    of JSON values): a pickle round trip runs in C."""
    return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
