"""Helpers for kubewasm plugins in Python (contract kubewasm:plugin@0.5.0).

Import it next to the bindings componentize-py generates; build with both folders on the path:
``componentize-py -d wit -w kubewasm:plugin/plugin componentize -p . -p SDK app -o plugin.wasm``
(``SDK`` is this folder's parent, ``plugin-sdk/python`` in the kubewasm checkout, or the
installed package's site-packages).

What it gives:

- ``Plugin``: a base class with ``synced``, ``tick`` and ``admit`` that do nothing (allow),
  ``finalize`` that does nothing and ``reconcile`` that fails, so a handler writes only what
  it uses: ``class Handler(Plugin, exports.Handler)``;
- controllers: ``manifest(controller=controller(APP, owns=[DEPLOYMENT], finalizer=True))``
  (``watch_label``, ``watch_index`` for other types that wake keys), then ``reconcile(key)``;
- status: ``Status().condition(condition("Ready", True, "Running")).field("url", u).apply(obj)``
  writes the object's status only when it changed, keeping each condition's transition time;
- metrics: ``manifest(metrics=[counter("sent_total", "Alerts sent", ["to"])])``, then
  ``metrics.inc("sent_total", ["ops"])`` (``gauge``, ``histogram``; ``set``, ``observe``);
- ``manifest(...)`` and ``subscribe(...)``: the manifest and its subscriptions with every
  field defaulted (``changes=["/spec"]`` for a change filter, ``fields=["/status/phase"]``
  or ``metadata_only=True`` to declare what the plugin reads);
- ``state``: the plugin's own key-value map kept by the host (``state.get``, ``state.set``,
  ``state.remove``, ``state.keys``); ``requeue_after(seconds)`` during ``handle``;
- admission answers: ``allow()``, ``deny(message)``, ``patch_to(obj)``; ``Selector`` to match
  labels as the host does;
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
from typing import Any, Callable, Optional, Sequence, Tuple

from kubewasm_sdk.selector import Selector
from kubewasm_sdk.status import Status, condition

from componentize_py_types import Err
from wit_world.imports import logging as _logging
from wit_world.imports import metrics as _metrics
from wit_world.imports import state as _state
from wit_world.imports import triggers as _triggers
from wit_world.imports import types

from kubewasm_sdk import _handles

# Handles go back to the host through a lighter finalizer than componentize-py's own (see
# _handles): about a microsecond less per object an event lends or a query returns.
_handles.install()

__all__ = [
    "POD", "SERVICE", "CONFIG_MAP", "NAMESPACE", "NODE", "EVENT", "DEPLOYMENT",
    "REPLICA_SET", "STATEFUL_SET", "DAEMON_SET", "JOB", "api_version", "gvk", "Index", "index",
    "key", "changed",
    "log", "fail", "to_handle_error", "handle_errors", "Plugin", "manifest", "subscribe",
    "schedule", "state", "requeue_after", "rule", "validating", "mutating", "allow", "deny",
    "patch_to", "Selector", "controller", "watch_label", "watch_index", "counter", "gauge",
    "histogram", "metrics", "Status", "condition",
]


def api_version(group: str, version: str) -> str:
    """The ``apiVersion`` string for a group and version: ``group/version``, or ``version`` for
    the core group (empty group)."""
    return f"{group}/{version}" if group else version


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
    """The event's kind (``added``, ``updated``, ``deleted``, ``sync``, ``requeue``) and its
    object (the new one for an update, the last known one for a delete)."""
    if isinstance(event, types.Event_Added):
        return "added", event.value.object
    if isinstance(event, types.Event_Updated):
        return "updated", event.value.new
    if isinstance(event, types.Event_Deleted):
        return "deleted", event.value.object
    if isinstance(event, types.Event_Requeue):
        return "requeue", event.value
    return "sync", event.value


def subscribe(
    resource: types.Gvk,
    namespaces: Sequence[str] = (),
    selector: Optional[str] = None,
    changes: Sequence[str] = (),
    fields: Sequence[str] = (),
    metadata_only: bool = False,
) -> types.Subscription:
    """A subscription: every object of ``resource``, or only those in ``namespaces``,
    matching the label ``selector``; with ``changes`` (JSON pointers such as ``/spec``), an
    update is delivered only when a value there changed (``/metadata/generation``: the spec).

    ``fields`` (JSON pointers such as ``/status/phase``) or ``metadata_only`` declare what the
    plugin reads besides metadata: the host keeps only that, and reading anything else
    (``field`` elsewhere, ``json()``) raises ``Err(QueryError_Undeclared)``."""
    return types.Subscription(
        gvk=resource,
        namespaces=list(namespaces),
        label_selector=selector,
        changes=list(changes),
        fields=list(fields),
        metadata_only=metadata_only,
    )


def index(resource: types.Gvk, name: str, json_pointer: str) -> types.Index:
    """A field index for ``manifest(indexes=...)``: objects of ``resource`` filed under the
    value at ``json_pointer`` (``/spec/nodeName``), queried by ``name``."""
    return types.Index(gvk=resource, name=name, json_pointer=json_pointer)


def schedule(name: str, cron: str, time_zone: Optional[str] = None, jitter_seconds: int = 0):
    """A named schedule for ``manifest``: ``tick(name)`` is called on it (five-field cron,
    in UTC unless ``time_zone``, or ``@every 30s``)."""
    return types.Schedule(
        name=name, cron=cron, time_zone=time_zone, jitter_seconds=jitter_seconds
    )


def manifest(
    subscriptions: Sequence[types.Subscription] = (),
    queries: Sequence[types.Gvk] = (),
    indexes: Sequence[types.Index] = (),
    resync_seconds: int = 0,
    schedules: Sequence[types.Schedule] = (),
    state: bool = False,
    admission: Optional[types.Admission] = None,
    controller: Optional[types.Controller] = None,
    metrics: Sequence[types.Metric] = (),
) -> types.Manifest:
    """What ``describe`` returns, every field defaulted."""
    return types.Manifest(
        subscriptions=list(subscriptions),
        queries=list(queries),
        indexes=list(indexes),
        resync_seconds=resync_seconds,
        schedules=list(schedules),
        state=state,
        admission=admission,
        controller=controller,
        metrics=list(metrics),
    )


def controller(
    reconciles: types.Gvk,
    owns: Sequence[types.Gvk] = (),
    watches: Sequence[types.Watched] = (),
    finalizer: bool = False,
) -> types.Controller:
    """A controller for ``manifest(controller=...)``: ``reconcile(key)`` is called for each
    object of ``reconciles``, once per burst of events on it, its ``owns`` children
    (through their controller ownerReference) and ``watches``; with ``finalizer``, the host
    keeps ``kubewasm.dev/<plugin>`` on each live object and calls ``finalize`` before it
    goes."""
    return types.Controller(
        reconciles=reconciles, owns=list(owns), watches=list(watches), finalizer=finalizer
    )


def watch_label(resource: types.Gvk, label: str) -> types.Watched:
    """A watched type whose objects' label ``label`` names a key in their namespace."""
    return types.Watched(gvk=resource, wakes=types.WakeMap_Label(label))


def watch_index(resource: types.Gvk, index_name: str) -> types.Watched:
    """A watched type whose objects' values in the manifest's index ``index_name`` are keys
    (``namespace/name``)."""
    return types.Watched(gvk=resource, wakes=types.WakeMap_Index(index_name))


def _metric(
    name: str, help: str, kind: Any, labels: Sequence[str], buckets: Sequence[float] = ()
) -> types.Metric:
    return types.Metric(
        name=name, help=help, kind=kind, labels=list(labels), buckets=[float(b) for b in buckets]
    )


def counter(name: str, help: str, labels: Sequence[str] = ()) -> types.Metric:
    """A counter for ``manifest(metrics=...)``: ``metrics.add`` or ``metrics.inc``."""
    return _metric(name, help, types.MetricKind.COUNTER, labels)


def gauge(name: str, help: str, labels: Sequence[str] = ()) -> types.Metric:
    """A gauge for ``manifest(metrics=...)``: ``metrics.set``."""
    return _metric(name, help, types.MetricKind.GAUGE, labels)


def histogram(
    name: str, help: str, labels: Sequence[str] = (), buckets: Sequence[float] = ()
) -> types.Metric:
    """A histogram for ``manifest(metrics=...)`` (no buckets: the host's defaults):
    ``metrics.observe``."""
    return _metric(name, help, types.MetricKind.HISTOGRAM, labels, buckets)


class _Metrics:
    """Updates of the metrics the manifest declares (each raises ``Err`` when refused:
    undeclared, past the plugin's series bound, or a value the metric cannot take)."""

    def add(self, name: str, labels: Sequence[str] = (), value: float = 1.0) -> None:
        """Adds ``value`` to counter ``name`` for these label values."""
        _metrics.add(name, list(labels), float(value))

    def inc(self, name: str, labels: Sequence[str] = ()) -> None:
        """Adds one to counter ``name``."""
        _metrics.add(name, list(labels), 1.0)

    def set(self, name: str, labels: Sequence[str] = (), value: float = 0.0) -> None:
        """Sets gauge ``name``."""
        _metrics.set(name, list(labels), float(value))

    def observe(self, name: str, labels: Sequence[str] = (), value: float = 0.0) -> None:
        """Records one observation in histogram ``name``."""
        _metrics.observe(name, list(labels), float(value))


metrics = _Metrics()


def rule(
    resource: types.Gvk,
    operations: Sequence[types.Operation],
    subresources: Sequence[str] = (),
) -> types.AdmissionRule:
    """An admission rule: ``operations`` (``types.Operation.CREATE``, ...) on objects of
    ``resource``, and on its ``subresources`` too."""
    return types.AdmissionRule(
        gvk=resource, operations=list(operations), subresources=list(subresources)
    )


def validating(
    rules: Sequence[types.AdmissionRule],
    ignore_failures: bool = False,
    timeout_seconds: int = 0,
    namespace_selector: Optional[str] = None,
    match_conditions: Sequence[Tuple[str, str]] = (),
) -> types.Admission:
    """A validating webhook for ``manifest(admission=...)``: ``admit`` allows or denies.
    When the plugin cannot answer, the request is refused (let through with
    ``ignore_failures``)."""
    return types.Admission(
        mutating=False,
        rules=list(rules),
        failure_policy=types.FailurePolicy.IGNORE if ignore_failures else types.FailurePolicy.FAIL,
        timeout_seconds=timeout_seconds,
        namespace_selector=namespace_selector,
        match_conditions=list(match_conditions),
    )


def mutating(rules: Sequence[types.AdmissionRule], **options: Any) -> types.Admission:
    """A mutating webhook (``admit`` may answer ``patch_to(obj)``); options as ``validating``."""
    admission = validating(rules, **options)
    admission.mutating = True
    return admission


def allow(*warnings: str) -> types.AdmissionResponse:
    """An admission answer that lets the request through."""
    return types.AdmissionResponse(
        allowed=True, message="", code=0, mutation=None, warnings=list(warnings)
    )


def deny(message: str, code: int = 0, *warnings: str) -> types.AdmissionResponse:
    """An admission answer that refuses the request with ``message`` (code 0: 403)."""
    return types.AdmissionResponse(
        allowed=False, message=message, code=code, mutation=None, warnings=list(warnings)
    )


def patch_to(obj: Any, *warnings: str) -> types.AdmissionResponse:
    """An admission answer that lets the request through changed into ``obj`` (a dict of the
    whole object): the host works out the JSON patch."""
    import json

    return types.AdmissionResponse(
        allowed=True,
        message="",
        code=0,
        mutation=types.Mutation_Object(json.dumps(obj)),
        warnings=list(warnings),
    )


class Plugin:
    """Defaults for what a handler may leave out: ``synced`` and ``tick`` do nothing,
    ``admit`` allows. Put it first: ``class Handler(Plugin, exports.Handler)``."""

    def synced(self) -> None:
        """Every subscription's initial state is in (also after a relist): does nothing."""
        return None

    def tick(self, schedule: str) -> None:
        """The schedule named ``schedule`` is due: does nothing."""
        return None

    def admit(self, request: types.AdmissionRequest) -> types.AdmissionResponse:
        """Reviews an admission request: allows it."""
        return allow()

    def reconcile(self, key: types.ObjectKey) -> None:
        """Reconciles one key of the manifest's controller: not implemented here."""
        raise Err(
            types.HandleError(
                message=f"reconcile of {key.name} is not implemented by this plugin", retry=False
            )
        )

    def finalize(self, key: types.ObjectKey) -> None:
        """The object of ``key`` is being deleted: nothing to release."""
        return None


class _State:
    """The plugin's own key-value map, kept by the host across instances, versions and
    leaders (declare it: ``manifest(state=True)``). Changes made during a call take effect
    when it returns without error."""

    def get(self, key: str) -> Optional[str]:
        """The value of ``key``, or None."""
        return _state.get(key)

    def set(self, key: str, value: str) -> None:
        """Sets ``key`` to ``value`` (raises ``Err`` past the plugin's state bounds)."""
        _state.set(key, value)

    def remove(self, key: str) -> None:
        """Removes ``key``."""
        _state.remove(key)

    def keys(self, prefix: str = "") -> list:
        """The keys starting with ``prefix``, sorted."""
        return _state.keys(prefix)


state = _State()


def requeue_after(seconds: int) -> None:
    """Calls ``handle`` again for the event's object ``seconds`` from now, with its current
    state (a ``requeue`` event). During ``reconcile``: reconciles the key again then (an
    earlier wake wins). Only during ``handle`` and ``reconcile``."""
    _triggers.requeue_after(seconds)


class _Log:
    """Log lines with fields, into the host's log with the plugin's name and object key."""

    def _write(self, level: Any, message: str, fields: dict) -> None:
        _logging.log(level, message, [(str(k), str(v)) for k, v in fields.items()])

    def debug(self, message: str, **fields: Any) -> None:
        """Logs at debug level."""
        self._write(_logging.Level.DEBUG, message, fields)

    def info(self, message: str, **fields: Any) -> None:
        """Logs at info level."""
        self._write(_logging.Level.INFO, message, fields)

    def warn(self, message: str, **fields: Any) -> None:
        """Logs at warn level."""
        self._write(_logging.Level.WARN, message, fields)

    def error(self, message: str, **fields: Any) -> None:
        """Logs at error level."""
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
    "Undeclared": ("undeclared", False),
    "NotLeader": ("not leader", True),
    "Unsupported": ("unsupported", False),
    "NotDeclared": ("not declared", False),
    "Unavailable": ("unavailable", False),
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
