"""ds_status as Python exceptions.

``STATUS_TABLE`` mirrors ``DS_STATUS_LIST`` in include/detshare/detshare.h
entry for entry (name, value, description); a test compares the two so they
cannot drift. Every entry but ``DS_SUCCESS`` gets one :class:`DetShareError`
subclass, generated from the table and named after the status
(``DS_ERR_INVALID_ARGUMENT`` -> :class:`InvalidArgumentError`). Where a builtin
exception means the same thing the class derives from it too, so
``except ValueError`` catches :class:`InvalidArgumentError` and
:class:`TimeoutError` here is also a :class:`builtins.TimeoutError`.

Every exception raised for a failed library call carries the library's
``ds_last_error_message()`` of the calling thread, read right after the call.
"""

from __future__ import annotations

import builtins
from typing import Dict, Optional, Tuple, Type

# (name, value, description): DS_STATUS_LIST, in order.
STATUS_TABLE: Tuple[Tuple[str, int, str], ...] = (
    ("DS_SUCCESS", 0, "success"),
    ("DS_ERR_INVALID_ARGUMENT", 1, "invalid argument"),
    ("DS_ERR_INVALID_HANDLE", 2, "NULL, foreign or destroyed handle"),
    ("DS_ERR_ABI_MISMATCH", 3, "attribute struct has a wrong size, magic or version"),
    ("DS_ERR_NO_DRIVER", 4, "CUDA driver library (libcuda.so.1) not found or unusable"),
    ("DS_ERR_DRIVER_TOO_OLD", 5, "CUDA driver too old (green contexts need 12.5 or later)"),
    ("DS_ERR_NO_DEVICE", 6, "no such CUDA device"),
    ("DS_ERR_NOT_SUPPORTED", 7, "not supported by this device, driver or build"),
    ("DS_ERR_DRIVER", 8, "a CUDA driver call failed"),
    ("DS_ERR_OUT_OF_MEMORY", 9, "out of memory"),
    ("DS_ERR_INVALID_LAUNCH", 10, "launch configuration outside the device's limits"),
    ("DS_ERR_BUSY", 11, "operation not allowed now (a section is open)"),
    ("DS_ERR_TIMEOUT", 12, "work did not finish within the time limit"),
    ("DS_ERR_NOT_FOUND", 13, "no such object"),
    ("DS_ERR_ALREADY_EXISTS", 14, "an object with that name already exists"),
    ("DS_ERR_LIMIT", 15, "a configured limit was reached"),
    ("DS_ERR_DEVICE_FAULT", 16, "the device context faulted"),
    ("DS_ERR_INTERNAL", 17, "internal error (a bug in libdetshare)"),
    ("DS_ERR_MEMORY_QUOTA", 18, "the vCtx's device-memory quota would be exceeded"),
    ("DS_ERR_CAPTURE", 19, "graph capture failed or captured work that cannot follow the vCtx"),
    ("DS_ERR_PEER_LOST", 20, "a rank of the vCtx's group left or its process died"),
)

DS_SUCCESS = 0


class DetShareError(Exception):
    """A libdetshare call failed.

    Attributes:
        status: the ``ds_status`` value (int).
        status_name: e.g. ``"DS_ERR_BUSY"``.
        description: the static description of the status.
        message: the library's ``ds_last_error_message()`` for this failure
            ("" when the error was raised by the binding itself).
        function: the C function (or binding method) that failed.
    """

    status: int = -1
    status_name: str = "DS_STATUS_UNKNOWN"
    description: str = "unknown status"

    def __init__(self, message: str = "", *, function: str = "", status: Optional[int] = None) -> None:
        if status is not None:
            self.status = status
        self.message = message
        self.function = function
        if message.startswith(self.status_name):
            text = message  # the library's message names the status and the call
        else:
            head = f"{function}: " if function else ""
            detail = f": {message}" if message else ""
            text = f"{head}{self.status_name} ({self.description}){detail}"
        super().__init__(text)


# Builtins a status also means; the subclass derives from both.
_ALSO: Dict[str, Type[BaseException]] = {
    "DS_ERR_INVALID_ARGUMENT": ValueError,
    "DS_ERR_OUT_OF_MEMORY": MemoryError,
    "DS_ERR_TIMEOUT": builtins.TimeoutError,
    "DS_ERR_NOT_FOUND": LookupError,
}


def class_name(status_name: str) -> str:
    """``DS_ERR_NO_DRIVER`` -> ``NoDriverError``."""
    words = status_name[len("DS_ERR_"):].split("_")
    return "".join(w.capitalize() for w in words) + "Error"


def _make_classes() -> Dict[int, Type[DetShareError]]:
    out: Dict[int, Type[DetShareError]] = {}
    for name, value, desc in STATUS_TABLE:
        if value == DS_SUCCESS:
            continue
        bases: Tuple[type, ...] = (DetShareError,)
        if name in _ALSO:
            bases = bases + (_ALSO[name],)
        cls = type(
            class_name(name),
            bases,
            {
                "status": value,
                "status_name": name,
                "description": desc,
                "__doc__": f"{name} ({value}): {desc}.",
                "__module__": __name__,
            },
        )
        out[value] = cls
    return out


ERROR_CLASSES: Dict[int, Type[DetShareError]] = _make_classes()
"""status value -> exception class, for every error status."""

globals().update({c.__name__: c for c in ERROR_CLASSES.values()})

# Named for type checkers and readers; the assignments are the generated classes.
InvalidArgumentError: Type[DetShareError] = ERROR_CLASSES[1]
InvalidHandleError: Type[DetShareError] = ERROR_CLASSES[2]
AbiMismatchError: Type[DetShareError] = ERROR_CLASSES[3]
NoDriverError: Type[DetShareError] = ERROR_CLASSES[4]
DriverTooOldError: Type[DetShareError] = ERROR_CLASSES[5]
NoDeviceError: Type[DetShareError] = ERROR_CLASSES[6]
NotSupportedError: Type[DetShareError] = ERROR_CLASSES[7]
DriverError: Type[DetShareError] = ERROR_CLASSES[8]
OutOfMemoryError: Type[DetShareError] = ERROR_CLASSES[9]
InvalidLaunchError: Type[DetShareError] = ERROR_CLASSES[10]
BusyError: Type[DetShareError] = ERROR_CLASSES[11]
TimeoutError: Type[DetShareError] = ERROR_CLASSES[12]  # noqa: A001 (also a builtins.TimeoutError)
NotFoundError: Type[DetShareError] = ERROR_CLASSES[13]
AlreadyExistsError: Type[DetShareError] = ERROR_CLASSES[14]
LimitError: Type[DetShareError] = ERROR_CLASSES[15]
DeviceFaultError: Type[DetShareError] = ERROR_CLASSES[16]
InternalError: Type[DetShareError] = ERROR_CLASSES[17]
MemoryQuotaError: Type[DetShareError] = ERROR_CLASSES[18]
CaptureError: Type[DetShareError] = ERROR_CLASSES[19]
PeerLostError: Type[DetShareError] = ERROR_CLASSES[20]


def error_for(status: int, message: str = "", function: str = "") -> DetShareError:
    """The exception for a status value (the base class for values outside the
    table). ``status`` must not be ``DS_SUCCESS``."""
    if status == DS_SUCCESS:
        raise ValueError("DS_SUCCESS is not an error")
    cls = ERROR_CLASSES.get(status)
    if cls is None:
        return DetShareError(message, function=function, status=status)
    return cls(message, function=function)


def status_name(status: int) -> str:
    """Name of a status value from the table, or ``DS_STATUS_UNKNOWN``."""
    for name, value, _ in STATUS_TABLE:
        if value == status:
            return name
    return "DS_STATUS_UNKNOWN"


def check(status: int, function: str = "") -> None:
    """Raises the status's exception, with ``ds_last_error_message()``, unless
    ``status`` is ``DS_SUCCESS``. Call it on the thread that made the call."""
    if status == DS_SUCCESS:
        return
    from ._lib import lib

    raw = lib().ds_last_error_message()
    msg = raw.decode("utf-8", "replace") if raw else ""
    raise error_for(status, msg, function)


__all__ = [
    "STATUS_TABLE",
    "ERROR_CLASSES",
    "DetShareError",
    "check",
    "error_for",
    "status_name",
    "class_name",
] + [c.__name__ for c in ERROR_CLASSES.values()]
