//! `kubewasm test --compare OLD NEW`: one test file (a recording) replayed through two
//! versions of a plugin, and what differs between them step by step: the writes each sent,
//! its admission answers and its state. Log lines are not compared (a new version may well
//! say things differently).

use std::collections::BTreeMap;

use super::StepResult;

/// What differs between `old`'s and `new`'s run of one step, one readable line each: a
/// write only one of them sent (`- ` OLD's, `+ ` NEW's, each write matched once, in any
/// order), a different admission answer, a different state. Empty when they behaved alike.
pub fn step_differences(old: &StepResult, new: &StepResult) -> Vec<String> {
    let mut out = Vec::new();
    let mut unmatched: BTreeMap<&str, i64> = BTreeMap::new();
    for w in &old.sent {
        *unmatched.entry(w).or_default() += 1;
    }
    for w in &new.sent {
        *unmatched.entry(w).or_default() -= 1;
    }
    for (write, n) in &unmatched {
        let (sign, count) = if *n > 0 { ("-", *n) } else { ("+", -n) };
        for _ in 0..count {
            out.push(format!("{sign} {write}"));
        }
    }
    if !out.is_empty() {
        out.insert(0, "writes (- only OLD sent; + only NEW sent):".into());
    }
    let show = |a: &Option<crate::admission::review::Answer>| match a {
        None => "none".to_owned(),
        Some(a) if a.allowed => {
            let patch = a
                .patch
                .as_ref()
                .map_or_else(String::new, |p| format!(", patch {p}"));
            format!("allowed{patch}")
        }
        Some(a) => format!("denied ({}): {}", a.code, a.message),
    };
    let (a, b) = (show(&old.answer), show(&new.answer));
    if a != b {
        out.push(format!("admission: OLD {a}; NEW {b}"));
    }
    if old.state != new.state {
        let json = |s| serde_json::to_string(s).unwrap_or_default();
        out.push(format!(
            "state: OLD {}; NEW {}",
            json(&old.state),
            json(&new.state)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review::Answer;

    fn step(sent: &[&str]) -> StepResult {
        StepResult {
            name: "s".into(),
            lines: 0,
            writes: sent.len(),
            sent: sent.iter().map(|s| (*s).to_owned()).collect(),
            state: BTreeMap::new(),
            answer: None,
            problems: Vec::new(),
        }
    }

    #[test]
    fn writes_compare_as_multisets_in_any_order() {
        let old = step(&["apply a", "apply b", "apply b"]);
        assert!(step_differences(&old, &step(&["apply b", "apply a", "apply b"])).is_empty());
        let diff = step_differences(&old, &step(&["apply b", "delete c"]));
        assert_eq!(
            diff,
            [
                "writes (- only OLD sent; + only NEW sent):",
                "- apply a",
                "- apply b",
                "+ delete c"
            ]
        );
    }

    #[test]
    fn answers_and_state_that_differ_are_named() {
        let mut old = step(&[]);
        let mut new = step(&[]);
        old.answer = Some(Answer {
            allowed: true,
            ..Answer::default()
        });
        new.answer = Some(Answer {
            allowed: false,
            code: 403,
            message: "no".into(),
            ..Answer::default()
        });
        new.state.insert("k".into(), "v".into());
        let diff = step_differences(&old, &new);
        assert_eq!(
            diff,
            [
                "admission: OLD allowed; NEW denied (403): no",
                r#"state: OLD {}; NEW {"k":"v"}"#
            ]
        );
    }
}
