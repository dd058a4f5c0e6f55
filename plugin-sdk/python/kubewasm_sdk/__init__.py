"""Helpers for kubewasm plugins in Python (contract kubewasm:plugin@0.2.0).

Import it next to the bindings componentize-py generates; build with both folders on the path:
``componentize-py -d wit -w kubewasm:plugin/plugin componentize -p . -p SDK app -o plugin.wasm``
(``SDK`` is this folder's parent, ``plugin-sdk/python`` in the kubewasm checkout, or the
installed package's site-packages).

What it gives:

- resource types (``POD``, ``DEPLOYMENT``, ... and ``gvk("apps/v1", "Deployment")``);
- the built-in index names (``Index.NAMESPACE``, ``Index.OWNER_UID``, ``Index.LABEL_KEY``,
  ``Index.LABEL``) and ``key(namespace, name)``, the cache's object key;
- ``changed(event)``: the event's kind and its current object;
- ``log.info("message", pod=key, phase="Running")``: logging with fields;
- cheaper handles: importing it gives each object handle a lighter finalizer than
  componentize-py's (``_handles``), with the same behaviour;
- errors: ``fail("why", retry=True)`` ends ``handle`` with a handle error; ``handle_errors``
  (a decorator) turns a failed query or write, and any other exception, into one, retried as
  the Rust SDK does (see ``to_handle_error``).
"""

from __future__ import annotations

import functools
import traceback
from typing import Any, Callable, Optional, Tuple

from componentize_py_types import Err
from wit_world.imports import logging as _logging
from wit_world.imports import types

from kubewasm_sdk import _handles

# Handles go back to the host through a lighter finalizer than componentize-py's own (see
# _handles): about a microsecond less per object an event lends or a query returns.
_handles.install()

__all__ = [
    "POD", "SERVICE", "CONFIG_MAP", "NAMESPACE", "NODE", "EVENT", "DEPLOYMENT",
    "REPLICA_SET", "STATEFUL_SET", "DAEMON_SET", "JOB", "gvk", "Index", "key", "changed",
    "log", "fail", "to_handle_error", "handle_errors",
]


def gvk(api_version: str, kind: str) -> types.Gvk:
    """A resource type from an object's apiVersion (``apps/v1`` or ``v1``) and kind."""
    group, _, version = api_version.rpartition("/")
    return types.Gvk(group=group, version=version, kind=kind)


POD = gvk("v1", "Pod")
SERVICE = gvk("v1", "Service")
CONFIG_MAP = gvk("v1", "ConfigMap")
NAMESPACE = gvk("v1", "Namespace")
NODE = gvk("v1", "Node")
EVENT = gvk("v1", "Event")
DEPLOYMENT = gvk("apps/v1", "Deployment")
REPLICA_SET = gvk("apps/v1", "ReplicaSet")
STATEFUL_SET = gvk("apps/v1", "StatefulSet")
DAEMON_SET = gvk("apps/v1", "DaemonSet")
JOB = gvk("batch/v1", "Job")


class Index:
    """The indexes every cached type has, for ``cache.by_index`` and ``cache.index_keys``."""

    NAMESPACE = "namespace"
    """Objects of one namespace (value: the namespace)."""
    OWNER_UID = "owner-uid"
    """Objects owned by one object (value: the owner's uid)."""
    LABEL_KEY = "label-key"
    """Objects carrying a label (value: the label's key)."""
    LABEL = "label"
    """Objects carrying a label with a value (value: ``key=value``)."""


def key(namespace: Optional[str], name: str) -> str:
    """The cache's key of an object: ``namespace/name``, or ``name`` when cluster-scoped."""
    return f"{namespace}/{name}" if namespace else name


def changed(event: types.Event) -> Tuple[str, Any]:
    """The event's kind (``added``, ``updated``, ``deleted``, ``sync``) and its object (the
    new one for an update, the last known one for a delete)."""
    if isinstance(event, types.Event_Added):
        return "added", event.value.object
    if isinstance(event, types.Event_Updated):
        return "updated", event.value.new
    if isinstance(event, types.Event_Deleted):
        return "deleted", event.value.object
    return "sync", event.value


class _Log:
    """Log lines with fields, into the host's log with the plugin's name and object key."""

    def _write(self, level: Any, message: str, fields: dict) -> None:
        _logging.log(level, message, [(str(k), str(v)) for k, v in fields.items()])

    def debug(self, message: str, **fields: Any) -> None:
        self._write(_logging.Level.DEBUG, message, fields)

    def info(self, message: str, **fields: Any) -> None:
        self._write(_logging.Level.INFO, message, fields)

    def warn(self, message: str, **fields: Any) -> None:
        self._write(_logging.Level.WARN, message, fields)

    def error(self, message: str, **fields: Any) -> None:
        self._write(_logging.Level.ERROR, message, fields)


log = _Log()


def fail(message: str, retry: bool = True) -> None:
    """Ends ``handle`` with an error: the host retries the event with backoff when ``retry``,
    else gives it up now. Never returns."""
    raise Err(types.HandleError(message=message, retry=retry))


# Variant class names of query-error and write-error, their words, and whether to retry.
_ERRORS = {
    "Denied": ("denied", False),
    "NotCached": ("not cached", False),
    "UnknownIndex": ("unknown index", False),
    "InvalidArgument": ("invalid argument", False),
    "TooLarge": ("too large", None),
    "TooManyHandles": ("too many handles", True),
    "NotLeader": ("not leader", True),
    "Unsupported": ("unsupported", False),
}


def to_handle_error(error: BaseException) -> types.HandleError:
    """The handle error for an exception: a failed query is retried when the answer was too
    large or the instance held too many handles; a failed write only when this host was not
    the leader; a handle error raised with ``fail`` stays as it is; any other exception is
    retried, with its type and message."""
    if isinstance(error, Err):
        value = error.value
        if isinstance(value, types.HandleError):
            return value
        name = type(value).__name__
        variant = name.rpartition("_")[2]
        words, retry = _ERRORS.get(variant, (variant, True))
        if retry is None:
            # A query answer past the size cap may fit later; a staged write never will.
            retry = name.startswith("QueryError")
        return types.HandleError(message=f"{words}: {value.value}", retry=retry)
    last = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
    return types.HandleError(message=f"{type(error).__name__}: {error}{where}", retry=True)


def handle_errors(handle: Callable) -> Callable:
    """Decorates ``Handler.handle``: every exception leaves it as a handle error (see
    ``to_handle_error``), instead of a trap that discards the instance."""

    @functools.wraps(handle)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return handle(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the point is to catch everything
            raise Err(to_handle_error(error)) from error

    return wrapped
