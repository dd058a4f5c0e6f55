// Helpers for kubewasm plugins in JavaScript (contract kubewasm:plugin@0.5.0).
//
// componentize-js bundles what a plugin imports by relative path only (a package name fails
// with "Error loading module") and only inside the project folder: install it as a copy
// (`npm install --install-links PATH/plugin-sdk/javascript`, or `install-links=true` in
// .npmrc) and import "./node_modules/kubewasm-sdk/index.js".
//
// How a handler's errors reach the host (measured with componentize-js 0.23): a thrown
// object `{message, retry}` is the handle error; a thrown `Error` becomes one with its message
// and retry false (given up at once); a thrown string or other value traps, which discards the
// instance and is retried. `fail` and `handleErrors` make this explicit.

import { log as hostLog } from "kubewasm:plugin/logging@0.5.0";
import * as hostState from "kubewasm:plugin/state@0.5.0";
import * as hostMetrics from "kubewasm:plugin/metrics@0.5.0";
import { requeueAfter as hostRequeueAfter } from "kubewasm:plugin/triggers@0.5.0";
import { apply as hostApply } from "kubewasm:plugin/cluster@0.5.0";
import { Status as StatusRules } from "./status.js";

export { Selector } from "./selector.js";
export { condition } from "./status.js";

/**
 * The status a plugin owns on one object, its conditions and other fields, applied only when
 * they change (see status.js).
 */
export class Status extends StatusRules {
  /**
   * Stages a server-side apply of this status to `obj`'s `status` subresource unless the
   * object, as cached, already has it; whether a write was staged. The object must be read
   * whole or with `/status` among its declared fields. A refused write throws.
   */
  apply(obj) {
    const value = obj.field("/status");
    // Now, to the second, as `metav1.Time` is written.
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const status = this.changes(value?.tag === "json" ? JSON.parse(value.val) : null, now);
    if (status === null) return false;
    const target = { gvk: obj.gvk(), namespace: obj.namespace(), name: obj.name(), subresource: "status" };
    hostApply(target, JSON.stringify({ status }));
    return true;
  }
}

/**
 * The `apiVersion` string for a group and version: `group/version`, or `version` for the core
 * group (empty group).
 */
export function apiVersion(group, version) {
  return group ? `${group}/${version}` : version;
}

/** A resource type from an object's apiVersion (`apps/v1` or `v1`) and kind. */
export function gvk(apiVersion, kind) {
  const slash = apiVersion.lastIndexOf("/");
  return slash < 0
    ? { group: "", version: apiVersion, kind }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1), kind };
}

export const POD = gvk("v1", "Pod");
export const SERVICE = gvk("v1", "Service");
export const CONFIG_MAP = gvk("v1", "ConfigMap");
export const NAMESPACE = gvk("v1", "Namespace");
export const NODE = gvk("v1", "Node");
export const EVENT = gvk("v1", "Event");
export const DEPLOYMENT = gvk("apps/v1", "Deployment");
export const REPLICA_SET = gvk("apps/v1", "ReplicaSet");
export const STATEFUL_SET = gvk("apps/v1", "StatefulSet");
export const DAEMON_SET = gvk("apps/v1", "DaemonSet");
export const JOB = gvk("batch/v1", "Job");

/** The indexes every cached type has, for `byIndex` and `indexKeys`. */
export const Index = Object.freeze({
  /** Objects of one namespace (value: the namespace). */
  NAMESPACE: "namespace",
  /** Objects owned by one object (value: the owner's uid). */
  OWNER_UID: "owner-uid",
  /** Objects carrying a label (value: the label's key). */
  LABEL_KEY: "label-key",
  /** Objects carrying a label with a value (value: `key=value`). */
  LABEL: "label",
});

/** The cache's key of an object: `namespace/name`, or `name` when cluster-scoped. */
export function key(namespace, name) {
  return namespace ? `${namespace}/${name}` : name;
}

/**
 * A subscription: every object of `gvk`, or only those in `namespaces` matching the label
 * `selector`; with `changes` (JSON pointers such as `/spec`), an update is delivered only when
 * a value there changed (`/metadata/generation`: the spec). `fields` (JSON pointers such as
 * `/status/phase`) or `metadataOnly` declare what the plugin reads besides metadata: the host
 * keeps only that, and reading anything else (`field` elsewhere, `json()`) throws an
 * `undeclared` query error.
 */
export function subscribe(
  gvk,
  { namespaces = [], selector = undefined, changes = [], fields = [], metadataOnly = false } = {},
) {
  return { gvk, namespaces, labelSelector: selector, changes, fields, metadataOnly };
}

/**
 * A field index for `manifest({ indexes })`: objects of `gvk` filed under the value at
 * `jsonPointer` (`/spec/nodeName`), queried by `name`.
 */
export function index(gvk, name, jsonPointer) {
  return { gvk, name, jsonPointer };
}

/** A named schedule for `manifest`: `tick(name)` on it (cron in UTC, or `@every 30s`). */
export function schedule(name, cron, { timeZone = undefined, jitterSeconds = 0 } = {}) {
  return { name, cron, timeZone, jitterSeconds };
}

/** What `describe` returns, every field defaulted. */
export function manifest({
  subscriptions = [],
  queries = [],
  indexes = [],
  resyncSeconds = 0,
  schedules = [],
  state = false,
  admission = undefined,
  controller = undefined,
  metrics = [],
} = {}) {
  return {
    subscriptions, queries, indexes, resyncSeconds, schedules, state, admission, controller,
    metrics,
  };
}

/**
 * A controller for `manifest({ controller })`: `reconcile(key)` is called for each object of
 * `reconciles`, once per burst of events on it, its `owns` children (through their controller
 * ownerReference) and `watches`; with `finalizer`, the host keeps `kubewasm.dev/<plugin>` on
 * each live object and calls `finalize` before it goes.
 */
export function controller(reconciles, { owns = [], watches = [], finalizer = false } = {}) {
  return { reconciles, owns, watches, finalizer };
}

/** A watched type whose objects' label `label` names a key in their namespace. */
export function watchLabel(gvk, label) {
  return { gvk, wakes: { tag: "label", val: label } };
}

/** A watched type whose objects' values in the manifest's index `index` are keys. */
export function watchIndex(gvk, index) {
  return { gvk, wakes: { tag: "index", val: index } };
}

/** A counter for `manifest({ metrics })`: `metrics.add` or `metrics.inc`. */
export function counter(name, help, labels = []) {
  return { name, help, kind: "counter", labels, buckets: [] };
}

/** A gauge for `manifest({ metrics })`: `metrics.set`. */
export function gauge(name, help, labels = []) {
  return { name, help, kind: "gauge", labels, buckets: [] };
}

/** A histogram for `manifest({ metrics })` (no buckets: the host's defaults): `metrics.observe`. */
export function histogram(name, help, labels = [], buckets = []) {
  return { name, help, kind: "histogram", labels, buckets };
}

/**
 * Updates of the metrics the manifest declares; each throws when refused (undeclared, past the
 * plugin's series bound, or a value the metric cannot take).
 */
export const metrics = Object.freeze({
  /** Adds `value` (0 or more) to counter `name` for these label values. */
  add: (name, labels, value) => hostMetrics.add(name, labels, value),
  /** Adds one to counter `name` for these label values. */
  inc: (name, labels = []) => hostMetrics.add(name, labels, 1),
  /** Sets gauge `name` for these label values. */
  set: (name, labels, value) => hostMetrics.set(name, labels, value),
  /** Records one observation in histogram `name` for these label values. */
  observe: (name, labels, value) => hostMetrics.observe(name, labels, value),
});

/** An admission rule: `operations` (`"create"`, `"update"`, ...) on objects of `gvk`. */
export function rule(gvk, operations, { subresources = [] } = {}) {
  return { gvk, operations, subresources };
}

/**
 * A validating webhook for `manifest({ admission })`: `admit` allows or denies. When the
 * plugin cannot answer, the request is refused (let through with `ignoreFailures`).
 */
export function validating(
  rules,
  { ignoreFailures = false, timeoutSeconds = 0, namespaceSelector = undefined, matchConditions = [] } = {},
) {
  return {
    mutating: false,
    rules,
    failurePolicy: ignoreFailures ? "ignore" : "fail",
    timeoutSeconds,
    namespaceSelector,
    matchConditions,
  };
}

/** A mutating webhook (`admit` may answer `patchTo(object)`); options as `validating`. */
export function mutating(rules, options = {}) {
  return { ...validating(rules, options), mutating: true };
}

/** An admission answer that lets the request through. */
export function allow(...warnings) {
  return { allowed: true, message: "", code: 0, mutation: undefined, warnings };
}

/** An admission answer that refuses the request with `message` (code 0: 403). */
export function deny(message, { code = 0, warnings = [] } = {}) {
  return { allowed: false, message, code, mutation: undefined, warnings };
}

/** An admission answer that lets the request through changed into `object` (the whole object). */
export function patchTo(object, ...warnings) {
  return {
    allowed: true,
    message: "",
    code: 0,
    mutation: { tag: "object", val: JSON.stringify(object) },
    warnings,
  };
}

/**
 * A handler with defaults for what it leaves out: `synced`, `tick` and `finalize` do nothing,
 * `admit` allows, `reconcile` fails. `export const handler = plugin({ init, describe, handle })`.
 */
export function plugin(handler) {
  return {
    init(_config) {},
    synced() {},
    tick(_schedule) {},
    admit(_request) {
      return allow();
    },
    reconcile(key) {
      throw { message: `reconcile of ${key.name} is not implemented by this plugin`, retry: false };
    },
    finalize(_key) {},
    ...handler,
  };
}

/**
 * The plugin's own key-value map, kept by the host across instances, versions and leaders
 * (declare it: `manifest({ state: true })`). Changes made during a call take effect when it
 * returns without throwing.
 */
export const state = Object.freeze({
  /** The value of `key`, or undefined. */
  get: (key) => hostState.get(key),
  /** Sets `key` to `value` (throws past the plugin's state bounds). */
  set: (key, value) => hostState.set(key, value),
  /** Removes `key`. */
  remove: (key) => hostState.remove(key),
  /** The keys starting with `prefix`, sorted. */
  keys: (prefix = "") => hostState.keys(prefix),
});

/** Calls `handle` again for the event's object `seconds` from now (during `handle`); during
 * `reconcile`, reconciles the key again then (an earlier wake wins). */
export function requeueAfter(seconds) {
  hostRequeueAfter(seconds);
}

/** The event's kind (`added`, `updated`, `deleted`, `sync`, `requeue`) and its current object. */
export function changed(event) {
  switch (event.tag) {
    case "added":
      return [event.tag, event.val.object];
    case "updated":
      return [event.tag, event.val.new];
    case "deleted":
      return [event.tag, event.val.object];
    default:
      return [event.tag, event.val];
  }
}

function write(level, message, fields) {
  hostLog(level, message, Object.entries(fields ?? {}).map(([k, v]) => [k, String(v)]));
}

/** Log lines with fields: `log.info("pod seen", { pod: key })`. */
export const log = Object.freeze({
  /** Logs at debug level. */
  debug: (message, fields) => write("debug", message, fields),
  /** Logs at info level. */
  info: (message, fields) => write("info", message, fields),
  /** Logs at warn level. */
  warn: (message, fields) => write("warn", message, fields),
  /** Logs at error level. */
  error: (message, fields) => write("error", message, fields),
});

/** Ends `handle` with a handle error: retried with backoff when `retry`, else given up. */
export function fail(message, { retry = true } = {}) {
  throw { message, retry };
}

// Query-error and write-error cases: their words and whether to retry.
const ERRORS = {
  denied: ["denied", false],
  "not-cached": ["not cached", false],
  "unknown-index": ["unknown index", false],
  "invalid-argument": ["invalid argument", false],
  "too-large": ["too large", false],
  "too-many-handles": ["too many handles", true],
  undeclared: ["undeclared", false],
  "not-leader": ["not leader", true],
  unsupported: ["unsupported", false],
  "not-declared": ["not declared", false],
  unavailable: ["unavailable", false],
};

/**
 * The handle error for a thrown value: a failed query or write (jco's `payload` with a
 * `tag`) is retried when the instance held too many handles or this host was not the leader;
 * `{message, retry}` stays as it is; anything else is retried with its message.
 */
export function toHandleError(error) {
  const payload = error?.payload;
  if (payload && typeof payload.tag === "string") {
    const [words, retry] = ERRORS[payload.tag] ?? [payload.tag, true];
    return { message: `${words}: ${payload.val}`, retry };
  }
  if (error && typeof error === "object" && typeof error.message === "string") {
    if (typeof error.retry === "boolean" && !(error instanceof Error)) return error;
    return { message: `${error.name ?? "Error"}: ${error.message}`, retry: true };
  }
  return { message: String(error), retry: true };
}

/** Wraps a `handle` function: whatever it throws leaves as a handle error (`toHandleError`). */
export function handleErrors(handle) {
  return function (...args) {
    try {
      return handle.apply(this, args);
    } catch (error) {
      throw toHandleError(error);
    }
  };
}
