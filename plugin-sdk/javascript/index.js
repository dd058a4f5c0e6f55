// Helpers for kubewasm plugins in JavaScript (contract kubewasm:plugin@0.2.0).
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

import { log as hostLog } from "kubewasm:plugin/logging@0.2.0";

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

/** The event's kind (`added`, `updated`, `deleted`, `sync`) and its current object. */
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
  debug: (message, fields) => write("debug", message, fields),
  info: (message, fields) => write("info", message, fields),
  warn: (message, fields) => write("warn", message, fields),
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
  "not-leader": ["not leader", true],
  unsupported: ["unsupported", false],
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
