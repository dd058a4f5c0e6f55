// Saying how an object is on its status: conditions and fields, written only when they change.
//
// A reconcile states the whole status it owns every time (`new Status().condition(...)
// .field(...)`); `status.apply(obj)` (index.js) compares it with the object as cached and
// stages a server-side apply of the `status` subresource (the plugin's field manager) only when
// a value differs, so a reconcile that finds everything as it was writes nothing and wakes
// nothing: no status loop. A condition keeps its `lastTransitionTime` while its `status` stays
// the same. Apply names every field the plugin owns, so one left out of a later apply is
// removed: state all of them each time. The rules, shared by the four SDKs, are checked
// against plugin-sdk/status-cases.json. This module needs no bindings (node --test loads it).

/**
 * A condition as Kubernetes' API conventions write it: `status` true, false or null
 * (`Unknown`); `observedGeneration`, the `metadata.generation` it was worked out from (leave
 * it out for types whose conditions have none, such as a Namespace's).
 */
export function condition(type, status, reason = "", message = "", { observedGeneration } = {}) {
  const text = status === true ? "True" : status === false ? "False" : status ?? "Unknown";
  const out = { type, status: text, reason, message };
  if (observedGeneration !== undefined) out.observedGeneration = observedGeneration;
  return out;
}

/** Whether two JSON values are equal (objects compared by their keys, not their order). */
function equal(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((k) => Object.hasOwn(b, k) && equal(a[k], b[k]));
}

function same(want, current) {
  return (
    current.status === want.status &&
    (current.reason ?? "") === (want.reason ?? "") &&
    (current.message ?? "") === (want.message ?? "") &&
    (want.observedGeneration === undefined ||
      current.observedGeneration === want.observedGeneration)
  );
}

/** The status a plugin owns on one object: its conditions and other fields. */
export class Status {
  constructor() {
    this.conditions = [];
    this.fields = {};
  }

  /** Sets a condition (from `condition(...)`), replacing one of the same type. */
  condition(value) {
    this.conditions = this.conditions.filter((c) => c.type !== value.type);
    this.conditions.push({ ...value });
    return this;
  }

  /** Sets the top-level status field `name` (`readyReplicas`, `url`) to `value`. */
  field(name, value) {
    this.fields[name] = value;
    return this;
  }

  /**
   * The status to apply over `current` (the object's `status`, null when it has none) at
   * `at` (RFC 3339), or null when `current` already says all of it.
   */
  changes(current, at) {
    const cur = current !== null && typeof current === "object" ? current : {};
    const had = Array.isArray(cur.conditions) ? cur.conditions : [];
    const find = (type) => had.find((c) => c !== null && typeof c === "object" && c.type === type);
    const fieldsSame = Object.entries(this.fields).every(
      ([name, value]) => Object.hasOwn(cur, name) && equal(cur[name], value),
    );
    const conditionsSame = this.conditions.every((c) => {
      const old = find(c.type);
      return old !== undefined && same(c, old);
    });
    if (fieldsSame && conditionsSame) return null;
    const out = JSON.parse(JSON.stringify(this.fields));
    if (this.conditions.length > 0) {
      out.conditions = this.conditions.map((c) => {
        const old = find(c.type);
        const since =
          old !== undefined && old.status === c.status ? (old.lastTransitionTime ?? at) : at;
        return { ...c, lastTransitionTime: since };
      });
    }
    return out;
  }
}
