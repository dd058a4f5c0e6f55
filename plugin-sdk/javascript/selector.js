// Kubernetes label selectors, parsed and matched as the host matches them (the Rust SDK's
// `selector` module): comma-separated requirements, each `key`, `!key`, `key=value`,
// `key==value`, `key!=value`, `key in (a,b)` or `key notin (a,b)`; `!=` and `notin` also
// match objects without the key.

const SET = /^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^()]*)\)\s*$/;
const EQ = /^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$/;
const KEY = /^\s*(!?)\s*([^\s!=,()]+)\s*$/;

function split(text) {
  if (!text.trim()) return [];
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "(") depth++;
    else if (c === ")") depth--;
    else if (c === "," && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}

/** A parsed label selector: `new Selector("app=web,tier in (a,b)").matches(labels)`. */
export class Selector {
  constructor(text = "") {
    this.requirements = [];
    for (const part of split(text)) {
      if (!part.trim()) throw new Error(`invalid label selector "${text}": empty requirement`);
      let m = SET.exec(part);
      if (m) {
        const values = new Set(m[3].split(",").map((v) => v.trim()).filter((v) => v));
        this.requirements.push([m[1], m[2], values]);
        continue;
      }
      m = EQ.exec(part);
      if (m) {
        this.requirements.push([m[1], m[2] === "!=" ? "notin" : "in", new Set([m[3]])]);
        continue;
      }
      m = KEY.exec(part);
      if (m) {
        this.requirements.push([m[2], m[1] ? "absent" : "exists", new Set()]);
        continue;
      }
      throw new Error(`invalid label selector "${text}": cannot read "${part.trim()}"`);
    }
  }

  /**
   * A selector from a Kubernetes `LabelSelector` value (`matchLabels` and `matchExpressions`),
   * as in `spec.selector` of Deployments and ReplicaSets.
   */
  static fromLabelSelector(value) {
    const selector = new Selector();
    for (const [key, label] of Object.entries(value.matchLabels ?? {})) {
      if (typeof label !== "string") throw new Error(`matchLabels.${key} is not a string`);
      selector.requirements.push([key, "in", new Set([label])]);
    }
    const operators = { In: "in", NotIn: "notin", Exists: "exists", DoesNotExist: "absent" };
    for (const expression of value.matchExpressions ?? []) {
      if (typeof expression.key !== "string") throw new Error("matchExpressions[].key is missing");
      const op = operators[expression.operator];
      if (!op) {
        throw new Error(
          `matchExpressions[].operator "${expression.operator}" is not In, NotIn, Exists or DoesNotExist`,
        );
      }
      const values = new Set((expression.values ?? []).filter((v) => typeof v === "string"));
      selector.requirements.push([expression.key, op, values]);
    }
    return selector;
  }

  /** True when `labels` (an object, a Map, or a list of pairs) meets every requirement. */
  matches(labels) {
    const get =
      labels instanceof Map
        ? (k) => labels.get(k)
        : Array.isArray(labels)
          ? (k) => labels.find(([key]) => key === k)?.[1]
          : (k) => (Object.hasOwn(labels, k) ? labels[k] : undefined);
    for (const [key, op, values] of this.requirements) {
      const value = get(key);
      if (op === "exists" && value === undefined) return false;
      if (op === "absent" && value !== undefined) return false;
      if (op === "in" && !values.has(value)) return false;
      if (op === "notin" && value !== undefined && values.has(value)) return false;
    }
    return true;
  }
}
