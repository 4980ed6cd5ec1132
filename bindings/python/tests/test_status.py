"""The status table mirrors DS_STATUS_LIST, and every status maps to its class."""

from __future__ import annotations

import builtins
import re

import pytest

import detshare
from detshare import errors
from detshare._lib import lib

from conftest import REPO_ROOT

HEADER = REPO_ROOT / "include" / "detshare" / "detshare.h"


def header_status_list():
    """(name, value, description) of every X(...) entry of DS_STATUS_LIST."""
    text = HEADER.read_text()
    m = re.search(r"#define DS_STATUS_LIST\(X\)(.*?)\n\s*\n", text, re.S)
    assert m, "DS_STATUS_LIST not found in detshare.h"
    body = m.group(1)
    entries = re.findall(r'X\(\s*(DS_\w+)\s*,\s*(\d+)\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)', body)
    # every X( of the macro was understood
    assert len(entries) == body.count("X("), body
    return tuple((n, int(v), d) for n, v, d in entries)


def test_table_matches_the_header_text():
    assert errors.STATUS_TABLE == header_status_list()


def test_table_matches_the_built_library():
    for name, value, desc in errors.STATUS_TABLE:
        assert lib().ds_status_name(value).decode() == name
        assert lib().ds_status_string(value).decode() == desc
    assert lib().ds_status_name(999).decode() == "DS_STATUS_UNKNOWN"


def test_one_class_per_error_status():
    values = [v for _, v, _ in errors.STATUS_TABLE if v != 0]
    assert sorted(errors.ERROR_CLASSES) == values
    classes = list(errors.ERROR_CLASSES.values())
    assert len(set(classes)) == len(classes)
    for name, value, desc in errors.STATUS_TABLE:
        if value == 0:
            assert value not in errors.ERROR_CLASSES
            continue
        cls = errors.ERROR_CLASSES[value]
        assert issubclass(cls, detshare.DetShareError)
        assert cls.status == value and cls.status_name == name and cls.description == desc
        assert cls.__name__ == errors.class_name(name)
        # reachable by name from the package and from detshare.errors
        assert getattr(detshare, cls.__name__) is cls
        assert getattr(errors, cls.__name__) is cls


@pytest.mark.parametrize("name,value,desc", [e for e in errors.STATUS_TABLE if e[1] != 0])
def test_each_status_int_maps_to_its_class(name, value, desc):
    e = errors.error_for(value, "detail here", "ds_something")
    assert type(e) is errors.ERROR_CLASSES[value]
    assert e.status == value and e.status_name == name
    assert e.message == "detail here" and e.function == "ds_something"
    assert name in str(e) and "detail here" in str(e)
    with pytest.raises(errors.ERROR_CLASSES[value]):
        raise e


def test_expected_class_names():
    assert errors.ERROR_CLASSES[1] is detshare.InvalidArgumentError
    assert errors.ERROR_CLASSES[4] is detshare.NoDriverError
    assert errors.ERROR_CLASSES[11] is detshare.BusyError
    assert errors.ERROR_CLASSES[17] is detshare.InternalError


def test_builtin_bases():
    assert issubclass(detshare.InvalidArgumentError, ValueError)
    assert issubclass(detshare.OutOfMemoryError, MemoryError)
    assert issubclass(detshare.TimeoutError, builtins.TimeoutError)
    assert issubclass(detshare.NotFoundError, LookupError)


def test_success_is_not_an_error_and_unknown_values_get_the_base():
    assert errors.check(0) is None
    with pytest.raises(ValueError):
        errors.error_for(0)
    e = errors.error_for(4242, "x")
    assert type(e) is detshare.DetShareError and e.status == 4242
    assert errors.status_name(4242) == "DS_STATUS_UNKNOWN"


def test_check_carries_the_last_error_message_of_the_thread():
    # A failing call sets the thread's message; check() reads it.
    st = lib().ds_runtime_set_policy(None, b"x")
    with pytest.raises(detshare.InvalidHandleError) as ei:
        errors.check(st, "ds_runtime_set_policy")
    assert ei.value.message == lib().ds_last_error_message().decode()
    assert ei.value.message != ""
