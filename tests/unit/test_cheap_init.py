"""cheap_init: a frozen slots dataclass with a cheaper __init__ is still the same dataclass."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from boxmq.client.publishing import Publication
from boxmq.model import Envelope, MessageClass, MessageId, cheap_init


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    name: str
    size: int = 3
    tags: tuple[str, ...] = ()


@cheap_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Cheap:
    name: str
    size: int = 3
    tags: tuple[str, ...] = ()


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), (("a", 5), {}), (("a",), {"tags": ("x",)}), ((), {"size": 1, "name": "b"})],
)
def test_it_makes_what_the_dataclass_makes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    plain, cheap = _Plain(*args, **kwargs), _Cheap(*args, **kwargs)
    assert dataclasses.astuple(plain) == dataclasses.astuple(cheap)
    assert cheap == _Cheap(*args, **kwargs)
    assert hash(cheap) == hash(_Cheap(*args, **kwargs))
    assert repr(cheap) == repr(plain).replace("_Plain", "_Cheap")
    assert dataclasses.replace(cheap, size=9).size == 9
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(cheap, protocol)) == cheap
    assert copy.copy(cheap) == cheap
    assert copy.deepcopy(cheap) == cheap
    assert type(cheap) is _Cheap


def test_it_refuses_what_the_dataclass_refuses() -> None:
    with pytest.raises(TypeError):
        _Cheap()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Cheap("a", 1, (), 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Cheap("a", nope=1)  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Cheap("a").size = 4  # type: ignore[misc]


def test_the_values_of_the_hot_path_use_it() -> None:
    envelope = Envelope(MessageId("m"), 7)
    assert envelope.message_class is MessageClass.BYTES
    assert envelope.properties == ()
    # made by cheap_init, not by @dataclass
    assert Envelope.__new__.__qualname__ == "Envelope.__new__"
    assert vars(Envelope)["__init__"] is object.__init__
    publication = Publication("t", b"body", source="c")  # one per PUBLISH a broker stores
    assert (publication.qos, publication.properties, publication.source) == (1, None, "c")
    assert Publication.__new__.__qualname__ == "Publication.__new__"


def test_it_takes_only_shapes_it_can_make() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        items: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        size: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        size: int

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        size: int

    for cls in (WithFactory, Checked, NoSlots, NotFrozen):
        with pytest.raises(TypeError):
            cheap_init(cls)
