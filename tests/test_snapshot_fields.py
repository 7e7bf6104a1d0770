"""Each snapshot field is declared once (gfd/snapshot/model.py): reading, writing and
validation are derived from that declaration, so a new field is one declaration."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gfd import snapshot
from gfd.errors import SnapshotError
from gfd.snapshot import model
from gfd.snapshot.fields import (
    COUNT,
    TEXT,
    Items,
    Nullable,
    Planned,
    Reader,
    Record,
    bounded,
    declare,
    plan,
    read_record,
    write_record,
)

# --------------------------------------------------- a new field, declared once, in a test


@dataclass(frozen=True, slots=True)
class Sensor:
    index: int = field(metadata=declare(COUNT))
    temperature_c: int | None = field(
        default=None, metadata=declare(Nullable(bounded(200)), omit_default=True)
    )
    label: str = field(default="", metadata=declare(TEXT, key="name"))


@dataclass(frozen=True, slots=True)
class Board:
    sensors: tuple[Sensor, ...] = field(
        default=(), metadata=declare(Items(Record(Sensor), limit=2, what="sensors"))
    )


def read_board(document: Any) -> Board:
    board: Board = read_record(Board, Reader(document, "board"))
    return board


def test_a_record_declared_once_is_written_and_read_back() -> None:
    board = Board(sensors=(Sensor(0, 41, "inlet"), Sensor(1)))
    written = write_record(board, False)
    # the YAML name is the declared one; a field at its default is left out when declared so
    assert written == {
        "sensors": [{"index": 0, "temperature_c": 41, "name": "inlet"}, {"index": 1, "name": ""}]
    }
    assert read_board(written) == board
    assert read_board({}) == Board()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"sensors": [{"index": 0, "temperature_c": 201}]},
         "board.sensors[0].temperature_c: 201 is out of range (at most 200)"),
        ({"sensors": [{"index": 0, "name": 7}]}, "board.sensors[0].name: expected a string, got 7"),
        ({"sensors": [{"temperature_c": 20}]}, "board.sensors[0].index: required field is missing"),
        ({"sensors": [{"index": 0, "label": "x"}]}, "board.sensors[0].label: unknown key"),
        ({"sensors": [{"index": 0}] * 3}, "board.sensors: 3 sensors, more than the limit of 2"),
        ({"sensors": {"index": 0}}, "board.sensors: expected a list"),
    ],
)  # fmt: skip
def test_a_record_declared_once_is_validated(document: Any, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        read_board(document)
    assert str(caught.value).startswith(message)


@dataclass(frozen=True, slots=True)
class PoweredGpu(snapshot.Gpu):
    """The real GPU record with one more NVML fact, declared once."""

    power_limit_w: int | None = field(
        default=None, metadata=declare(Nullable(bounded(100_000)), omit_default=True)
    )


def test_a_new_gpu_field_is_one_declaration() -> None:
    gpu = snapshot.loads(DOCUMENT_TEXT).gpus[0]
    document = write_record(gpu, True)
    assert "power_limit_w" not in write_record(PoweredGpu(**_attributes(gpu)), True)
    read = read_record(PoweredGpu, Reader({**document, "power_limit_w": 700}, "gpus[0]"))
    assert read == PoweredGpu(**_attributes(gpu), power_limit_w=700)
    assert write_record(read, True) == {**document, "power_limit_w": 700}
    with pytest.raises(SnapshotError, match=r"^gpus\[0\]\.power_limit_w: expected an integer"):
        read_record(PoweredGpu, Reader({**document, "power_limit_w": "700W"}, "gpus[0]"))


def _attributes(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


# ---------------------------------------- every field of the real model, from its declaration

#: a node with every field set to something other than its default
FULL = snapshot.Snapshot(
    driver=snapshot.Driver("550.54.15", 12040),
    machine="DGX H100",
    vgpu=snapshot.Vgpu((snapshot.VgpuDevice("550.54.16", "r550_00"),)),
    gpus=(
        snapshot.Gpu(
            index=0,
            uuid="GPU-0",
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="0000:18:00.0",
            pci_class=0x030200,
            memory_mib=81559,
            compute_capability=snapshot.ComputeCapability(9, 0),
            mig=snapshot.Mig(
                enabled=True,
                devices=(
                    snapshot.MigDevice(
                        "1g.10gb", 9856, 16, snapshot.MigSlices(1, 1),
                        snapshot.MigEngines(1, 1, 1, 1, 1),
                    ),
                ),
            ),
            fabric=snapshot.Fabric("c5a8e7a2-0000-0000-0000-000000000000", 3),
        ),
        snapshot.Gpu(index=1, uuid="GPU-1", name="NVIDIA H100 80GB HBM3"),
    ),
    lost=(snapshot.LostGpu(index=2, pci_bus_id="0000:3a:00.0", reason="GPU is lost"),),
    topology=snapshot.Topology(
        gpus=(
            snapshot.GpuTopology(
                index=0, minor=0, numa_node=0, pcie_root="pci0000:17", cpu_affinity="0-47",
                nvlinks=(snapshot.NvLink(0, 4, "nvswitch", "0000:05:00.0"),),
            ),
        ),
        pairs=(snapshot.GpuPair((0, 1), "system", True),),
    ),
    discovery="vfio",
)  # fmt: skip
DOCUMENT_TEXT = snapshot.dumps(FULL)


def records(cls: type[Any] = snapshot.Snapshot) -> Iterator[type[Any]]:
    """Every record reachable from ``cls`` through its declared fields."""
    yield cls
    for planned in plan(cls):
        kind = planned.kind
        while isinstance(kind, (Nullable, Items)):
            kind = kind.inner if isinstance(kind, Nullable) else kind.item
        if isinstance(kind, Record):
            yield from records(kind.cls)


def declared_fields(
    cls: type[Any], document: dict[str, Any], path: str = ""
) -> Iterator[tuple[str, type[Any], Planned, dict[str, Any]]]:
    """(path, record, declaration, the mapping holding it) for every field of ``document``."""
    for planned in plan(cls):
        where = f"{path}.{planned.key}" if path else planned.key
        assert planned.key in document, f"{where} is not written"
        yield where, cls, planned, document
        kind, value = planned.kind, document[planned.key]
        if isinstance(kind, Nullable):
            kind = kind.inner
        if isinstance(kind, Items) and isinstance(kind.item, Record):
            yield from declared_fields(kind.item.cls, value[0], f"{where}[0]")
        elif isinstance(kind, Record):
            yield from declared_fields(kind.cls, value, where)


def test_every_record_of_the_model_is_reached_and_every_field_declared() -> None:
    defined = {
        value for value in vars(model).values()
        if isinstance(value, type) and dataclasses.is_dataclass(value)
    }  # fmt: skip
    assert set(records()) == defined
    # the plan is the declaration: every field of every record has one
    assert sum(len(plan(cls)) for cls in defined) == sum(
        len(dataclasses.fields(cls)) for cls in defined
    )


def test_the_full_node_round_trips() -> None:
    assert snapshot.loads(DOCUMENT_TEXT) == FULL
    assert snapshot.loads(snapshot.dumps_json(FULL)) == FULL


PATHS = [path for path, *_ in declared_fields(snapshot.Snapshot, snapshot.to_dict(FULL))]


def refused(document: dict[str, Any]) -> str:
    with pytest.raises(SnapshotError) as caught:
        snapshot.from_dict(document)
    return str(caught.value)


def field_at(position: int) -> tuple[dict[str, Any], str, type[Any], Planned, dict[str, Any]]:
    """A fresh document, and the field at ``position`` of it."""
    document = snapshot.to_dict(FULL)
    return (document, *list(declared_fields(snapshot.Snapshot, document))[position])


@pytest.mark.parametrize("position", range(len(PATHS)), ids=PATHS)
def test_each_declared_field_is_checked_at_its_path(position: int) -> None:
    """A wrong value, a missing key and an unknown key beside it are what the field's
    declaration says, named by the field's own path: for every field of the model."""
    document, path, cls, planned, holder = field_at(position)
    holder[planned.key] = {"zz": 1}  # no field holds a mapping with that key
    message = refused(document)
    assert message.startswith(path) and message[len(path)] in ":.[", message

    document, path, cls, planned, holder = field_at(position)
    del holder[planned.key]
    parent = path.rpartition(".")[0]
    if planned.required:
        assert refused(document) == f"{path}: required field is missing"
    else:
        reader = Reader(holder, parent)
        if cls is snapshot.Snapshot:
            reader.take("version")
        assert getattr(read_record(cls, reader), planned.name) == planned.default

    document, path, cls, planned, holder = field_at(position)
    holder["zz"] = 1
    assert refused(document) == (f"{parent}.zz" if parent else "zz") + ": unknown key"
