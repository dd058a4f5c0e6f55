//! Kubernetes label selectors: parse the string syntax, build, and match.
//!
//! The host and the SDK share this module so that a selector means the same on both sides.
//! Syntax (as `kubectl -l` and the API server accept it): comma-separated requirements, each one
//! of `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`.
//! `!=` and `notin` also match objects without the key, as in Kubernetes.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Why a label selector string does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {input:?}: {reason}")]
pub struct SelectorError {
    /// The selector as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// How a requirement compares a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// The key is present.
    Exists,
    /// The key is absent.
    DoesNotExist,
    /// The value is one of the values (`=`, `==` and `in`).
    In,
    /// The key is absent or its value is none of the values (`!=` and `notin`).
    NotIn,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The comparison.
    pub operator: Operator,
    /// The values for `In` and `NotIn`, sorted and without repeats; empty otherwise.
    pub values: Vec<String>,
}

impl Requirement {
    fn new(key: String, operator: Operator, mut values: Vec<String>) -> Self {
        // Sorted, a value is found by binary search: a requirement of a thousand values
        // costs each object it is matched against about ten comparisons, not a thousand.
        values.sort_unstable();
        values.dedup();
        Self {
            key,
            operator,
            values,
        }
    }

    fn has(&self, value: &str) -> bool {
        self.values
            .binary_search_by(|v| v.as_str().cmp(value))
            .is_ok()
    }
}

/// Something that has labels.
pub trait Labels {
    /// The value of label `key`, if present.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for [(String, String)] {
    fn label(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

impl Labels for Vec<(String, String)> {
    fn label(&self, key: &str) -> Option<&str> {
        self.as_slice().label(key)
    }
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> Labels for HashMap<String, String, S> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A label selector: every requirement must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses the Kubernetes string syntax.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        Parser {
            input,
            chars: input.char_indices().peekable(),
        }
        .parse()
    }

    /// The requirements, in order.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector has no requirement (it matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Adds `key=value`.
    pub fn eq(self, key: &str, value: &str) -> Self {
        self.with(key, Operator::In, &[value])
    }

    /// Adds `key!=value`.
    pub fn ne(self, key: &str, value: &str) -> Self {
        self.with(key, Operator::NotIn, &[value])
    }

    /// Adds `key in (values)`.
    pub fn is_in(self, key: &str, values: &[&str]) -> Self {
        self.with(key, Operator::In, values)
    }

    /// Adds `key notin (values)`.
    pub fn not_in(self, key: &str, values: &[&str]) -> Self {
        self.with(key, Operator::NotIn, values)
    }

    /// Adds `key` (the key must be present).
    pub fn exists(self, key: &str) -> Self {
        self.with(key, Operator::Exists, &[])
    }

    /// Adds `!key` (the key must be absent).
    pub fn absent(self, key: &str) -> Self {
        self.with(key, Operator::DoesNotExist, &[])
    }

    fn with(mut self, key: &str, operator: Operator, values: &[&str]) -> Self {
        self.requirements.push(Requirement::new(
            key.to_owned(),
            operator,
            values.iter().map(|v| (*v).to_owned()).collect(),
        ));
        self
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.label(&r.key);
            match r.operator {
                Operator::Exists => value.is_some(),
                Operator::DoesNotExist => value.is_none(),
                Operator::In => value.is_some_and(|v| r.has(v)),
                Operator::NotIn => value.is_none_or(|v| !r.has(v)),
            }
        })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match (r.operator, r.values.as_slice()) {
                (Operator::Exists, _) => write!(f, "{}", r.key)?,
                (Operator::DoesNotExist, _) => write!(f, "!{}", r.key)?,
                (Operator::In, [one]) => write!(f, "{}={}", r.key, one)?,
                (Operator::NotIn, [one]) => write!(f, "{}!={}", r.key, one)?,
                (Operator::In, values) => write!(f, "{} in ({})", r.key, values.join(","))?,
                (Operator::NotIn, values) => write!(f, "{} notin ({})", r.key, values.join(","))?,
            }
        }
        Ok(())
    }
}

struct Parser<'a> {
    input: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
}

impl Parser<'_> {
    fn error(&self, reason: impl Into<String>) -> SelectorError {
        SelectorError {
            input: self.input.to_owned(),
            reason: reason.into(),
        }
    }

    fn skip_spaces(&mut self) {
        while self.chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    }

    fn word(&mut self) -> &str {
        self.skip_spaces();
        let start = self.chars.peek().map_or(self.input.len(), |(i, _)| *i);
        let mut end = start;
        while let Some((i, c)) = self
            .chars
            .next_if(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        {
            end = i + c.len_utf8();
        }
        &self.input[start..end]
    }

    fn eat(&mut self, expected: char) -> bool {
        self.skip_spaces();
        self.chars.next_if(|(_, c)| *c == expected).is_some()
    }

    fn parse(mut self) -> Result<Selector, SelectorError> {
        let mut selector = Selector::default();
        self.skip_spaces();
        if self.chars.peek().is_none() {
            return Ok(selector);
        }
        loop {
            selector.requirements.push(self.requirement()?);
            self.skip_spaces();
            match self.chars.next() {
                None => return Ok(selector),
                Some((_, ',')) => {}
                Some((_, c)) => return Err(self.error(format!("unexpected {c:?}"))),
            }
        }
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        let key = self.word().to_owned();
        if key.is_empty() {
            return Err(self.error("expected a label key"));
        }
        Ok(key)
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.eat('!') {
            let key = self.key()?;
            return Ok(Requirement {
                key,
                operator: Operator::DoesNotExist,
                values: Vec::new(),
            });
        }
        let key = self.key()?;
        self.skip_spaces();
        let (operator, values) = match self.chars.peek().map(|(_, c)| *c) {
            None | Some(',') => (Operator::Exists, Vec::new()),
            Some('=') => {
                self.chars.next();
                self.eat('=');
                (Operator::In, vec![self.word().to_owned()])
            }
            Some('!') => {
                self.chars.next();
                if !self.eat('=') {
                    return Err(self.error(format!("expected `!=` after {key:?}")));
                }
                (Operator::NotIn, vec![self.word().to_owned()])
            }
            Some(_) => match self.word() {
                "in" => (Operator::In, self.value_set()?),
                "notin" => (Operator::NotIn, self.value_set()?),
                other => {
                    let other = other.to_owned();
                    return Err(self.error(format!(
                        "expected `=`, `!=`, `in` or `notin` after {key:?}, found {other:?}"
                    )));
                }
            },
        };
        Ok(Requirement::new(key, operator, values))
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        if !self.eat('(') {
            return Err(self.error("expected `(` to open a value set"));
        }
        let mut values = Vec::new();
        loop {
            values.push(self.word().to_owned());
            if self.eat(')') {
                return Ok(values);
            }
            if !self.eat(',') {
                return Err(self.error("expected `,` or `)` in a value set"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases every SDK's selector is held to (plugin-sdk/selector-cases.json): Python's
    /// and JavaScript's tests read the same file.
    #[test]
    fn matches_the_cases_every_sdk_shares() {
        let text = include_str!("../selector-cases.json");
        let cases: Vec<serde_json::Value> = serde_json::from_str(text).expect("cases");
        for case in cases {
            let selector =
                Selector::parse(case["selector"].as_str().expect("selector")).expect("parses");
            assert_matches_as_the_case_says(&selector, &case);
        }
    }

    /// That `selector` matches `case["labels"]` as `case["matches"]` says.
    fn assert_matches_as_the_case_says(selector: &Selector, case: &serde_json::Value) {
        let labels: Vec<(String, String)> = case["labels"]
            .as_object()
            .expect("labels")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("value").to_owned()))
            .collect();
        assert_eq!(
            selector.matches(&labels),
            case["matches"].as_bool().expect("matches"),
            "{case}"
        );
    }

    /// The cases every SDK's `from_label_selector` is held to
    /// (plugin-sdk/label-selector-cases.json): Python's and JavaScript's tests read the same
    /// file.
    #[cfg(feature = "guest")]
    #[test]
    fn reads_label_selector_values_as_every_sdk_does() {
        let text = include_str!("../label-selector-cases.json");
        let cases: Vec<serde_json::Value> = serde_json::from_str(text).expect("cases");
        for case in cases {
            let read = Selector::from_label_selector(&case["selector"]);
            match case["error"].as_str() {
                Some(expected) => {
                    let error = read.expect_err("refused").to_string();
                    assert!(error.contains(expected), "{case}: {error}");
                }
                None => assert_matches_as_the_case_says(&read.expect("reads"), &case),
            }
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn parses_every_operator() {
        let s =
            Selector::parse("app=web, tier==front,env!=prod,zone in (a, b),x notin (y),k,!gone")
                .expect("valid selector");
        let ops: Vec<_> = s.requirements().iter().map(|r| r.operator).collect();
        use Operator::*;
        assert_eq!(ops, [In, In, NotIn, In, NotIn, Exists, DoesNotExist]);
        assert_eq!(s.requirements()[3].values, ["a", "b"]);
    }

    #[test]
    fn values_in_any_order_or_repeated_match_as_a_set() {
        let l = labels(&[("app", "web"), ("zone", "b")]);
        let s = Selector::parse("zone in (c,b,a,b),app notin (x,db,x)").expect("valid");
        assert_eq!(s.requirements()[0].values, ["a", "b", "c"]);
        assert_eq!(s.to_string(), "zone in (a,b,c),app notin (db,x)");
        assert!(s.matches(&l));
        // A thousand values: each is found, and a value between two of them is not.
        let many: Vec<String> = (0..1000).map(|i| format!("v{:04}", i * 2)).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let s = Selector::everything().is_in("zone", &many);
        for (value, found) in [
            ("v0000", true),
            ("v1998", true),
            ("v0998", true),
            ("v0999", false),
        ] {
            let l = labels(&[("zone", value)]);
            assert_eq!(s.matches(&l), found, "{value}");
        }
        assert!(
            !Selector::everything()
                .not_in("zone", &many)
                .matches(&labels(&[("zone", "v0500")]))
        );
    }

    #[test]
    fn matches_like_kubernetes() {
        let l = labels(&[("app", "web"), ("zone", "a")]);
        let yes = |s: &str| Selector::parse(s).expect("valid").matches(&l);
        assert!(yes(""));
        assert!(yes("app=web"));
        assert!(!yes("app=db"));
        assert!(yes("env!=prod"), "!= matches a missing key");
        assert!(yes("zone in (a,b)"));
        assert!(!yes("zone notin (a)"));
        assert!(yes("missing notin (a)"), "notin matches a missing key");
        assert!(yes("app"));
        assert!(!yes("!app"));
        assert!(yes("!missing"));
        assert!(!yes("app=web,missing"), "all requirements must hold");
    }

    #[test]
    fn rejects_malformed_input_with_a_reason() {
        for bad in [
            "=x",
            "app=web,",
            "app in a",
            "app in (a",
            "app ~ b",
            "app!x",
        ] {
            let err = Selector::parse(bad).expect_err(bad);
            assert_eq!(err.input, bad);
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn display_round_trips_through_parse() {
        let built = Selector::everything()
            .eq("app", "web")
            .ne("env", "prod")
            .is_in("zone", &["a", "b"])
            .not_in("x", &["1", "2"])
            .exists("k")
            .absent("gone");
        let text = built.to_string();
        assert_eq!(
            text,
            "app=web,env!=prod,zone in (a,b),x notin (1,2),k,!gone"
        );
        assert_eq!(Selector::parse(&text).expect("round trip"), built);
    }
}
