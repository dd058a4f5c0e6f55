//! How kubewasm reads manifests' YAML: as kubectl resolves scalars
//! (`0644` is octal, `yes` is a boolean, `<<` merges), with a key written twice in one
//! mapping an error naming it, and bounded work per document.

use serde::de::DeserializeOwned;
use serde_saphyr::Budget;
use serde_saphyr::budget::BudgetBreach;

/// The reader's settings.
pub fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    options.merge_keys = serde_saphyr::MergeKeyPolicy::Merge;
    options.legacy_octal_numbers = true;
    options
}

/// A limit a document went over, in its author's terms. The limits are the reader's defaults,
/// which `options` keeps (250,000 nodes, aliases counted each time they are used; 50,000
/// aliases; 64 levels of nesting, which keeps its recursion well inside a thread's stack: 100
/// levels overflowed a test thread's 2 MiB in a debug build).
fn over_budget(breach: &BudgetBreach) -> String {
    let budget = Budget::default();
    match breach {
        BudgetBreach::Nodes { .. } => format!(
            "more than {} YAML nodes in one document (each use of an alias counts its nodes again)",
            budget.max_nodes
        ),
        BudgetBreach::Depth { .. } => format!("nested more than {} levels deep", budget.max_depth),
        BudgetBreach::Aliases { .. } => {
            format!("more than {} aliases in one document", budget.max_aliases)
        }
        BudgetBreach::Events { .. } => {
            format!(
                "more than {} YAML events in one document",
                budget.max_events
            )
        }
        BudgetBreach::ScalarBytes { .. } => format!(
            "more than {} bytes of scalar text in one document",
            budget.max_total_scalar_bytes
        ),
        other => format!("over a limit of the YAML reader ({other:?})"),
    }
}

/// Said after a key written twice: a deliberate difference from kubectl.
pub const DUPLICATE_NOTE: &str = " (kubectl keeps the last value; kubewasm refuses the document rather than pick for its author: remove one)";

/// What the reader says of a quoted value's continuation line that is not indented enough.
const QUOTED_INDENT: &str = "invalid indentation in multiline quoted scalar";

/// `text` with every continuation line of a quoted value in block context indented one column
/// past the value's opening quote; `None` when none needed it.
fn indent_quoted_continuations(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 64);
    let mut changed = false;
    // The open quote and the least indentation its continuation lines need.
    let mut open: Option<(u8, usize)> = None;
    let mut flow = 0usize;
    // The last byte that is not a space, on this line, outside quotes (None: line start).
    let mut previous: Option<u8> = None;
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' {
            i += 1;
            // A new line: its indentation, and, inside a quote, whether it needs more.
            let spaces = bytes[i..].iter().take_while(|&&c| c == b' ').count();
            let blank = matches!(bytes.get(i + spaces), None | Some(b'\n' | b'\r'));
            if let Some((_, need)) = open
                && flow == 0
                && !blank
                && spaces < need
            {
                out.push_str(&text[copied..i]);
                out.extend(std::iter::repeat_n(' ', need - spaces));
                copied = i;
                changed = true;
            }
            if open.is_none() {
                previous = None;
            }
            continue;
        }
        match open {
            Some((quote, _)) => {
                if quote == b'"' && b == b'\\' {
                    i += 2;
                    continue;
                }
                if b == quote {
                    if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    open = None;
                    previous = Some(b);
                }
            }
            None => match b {
                b' ' | b'\t' => {}
                b'#' if previous.is_none()
                    || matches!(bytes.get(i.wrapping_sub(1)), Some(b' ' | b'\t')) =>
                {
                    // A comment, to the end of the line.
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                    continue;
                }
                b'"' | b'\''
                    if matches!(
                        previous,
                        None | Some(b':' | b'-' | b'?' | b',' | b'[' | b'{')
                    ) =>
                {
                    // Past the quote's own column is past the block it sits in, whatever
                    // the key or list item before it.
                    let column = i - text[..i].rfind('\n').map_or(0, |n| n + 1);
                    open = Some((b, column + 1));
                }
                b'[' | b'{' => {
                    flow += 1;
                    previous = Some(b);
                }
                b']' | b'}' => {
                    flow = flow.saturating_sub(1);
                    previous = Some(b);
                }
                // `:`, `-` and `?` are indicators only before a space or the line's end (or,
                // for `:`, in a flow collection); elsewhere they are text of a plain scalar
                // (`Must not contain ':'.`), after which no quote opens a value.
                b':' | b'-' | b'?'
                    if !(matches!(bytes.get(i + 1), None | Some(b' ' | b'\t' | b'\n' | b'\r'))
                        || (b == b':' && flow > 0)) =>
                {
                    previous = Some(b'.');
                }
                other => previous = Some(other),
            },
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    changed.then_some(out)
}

/// Whether `text` is well-formed YAML, whatever it holds (a duplicate key is not syntax; a
/// number JSON cannot hold, `.inf`, counts as one, as kubectl stops there too): what tells a
/// syntax error, after which kubectl stops reading a file, from a document that is only not a
/// valid object.
pub fn well_formed(text: &str) -> bool {
    let mut lenient = options();
    lenient.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::FirstWins;
    let read = |text: &str| {
        serde_saphyr::from_str_with_options::<serde::de::IgnoredAny>(text, lenient.clone()).is_ok()
    };
    read(text) || indent_quoted_continuations(text).is_some_and(|t| read(&t))
}

/// The error `e` wraps, if it only adds context (a snippet, the alias it came through).
fn inner(mut e: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::WithSnippet { error, .. }
    | serde_saphyr::Error::AliasError { error, .. } = e
    {
        e = error;
    }
    e
}

/// Reads one YAML document into `T`; the error is one line, `line L column C: reason`, with
/// the line counted from `first_line` (the document's first line in its file).
pub fn from_str_at<T: DeserializeOwned>(text: &str, first_line: usize) -> Result<T, String> {
    let parsed = serde_saphyr::from_str_with_options(text, options());
    // go-yaml writes a long quoted value's continuation lines at its key's indentation, and
    // kubectl reads them; this reader holds them to YAML 1.2's rule (one column more). The
    // leading spaces of a continuation line are folded away, so indenting them changes no
    // value: such a document is read again with them indented.
    let parsed = match parsed {
        Err(e) if e.to_string().contains(QUOTED_INDENT) => {
            match indent_quoted_continuations(text) {
                Some(indented) => {
                    serde_saphyr::from_str_with_options(&indented, options()).or(Err(e))
                }
                None => Err(e),
            }
        }
        other => other,
    };
    parsed.map_err(|e| {
        let reason = match inner(&e) {
            serde_saphyr::Error::Budget { breach, .. } => over_budget(breach),
            // kubectl fails on these too, as JSON has no infinity or NaN.
            serde_saphyr::Error::NonFiniteFloat { value, .. } => format!(
                "`{value}` is not a finite number, which JSON and so Kubernetes cannot hold; \
                 quote it if it is text"
            ),
            _ => {
                let message = e.to_string();
                let message = message.lines().next().unwrap_or("").trim();
                let message = message.strip_prefix("error: ").unwrap_or(message);
                // The parser's own position is within the document; the caller's is within
                // the file.
                let reason = match message.split_once(": ") {
                    Some((place, reason)) if place.starts_with("line ") => reason,
                    _ => message,
                };
                let reason =
                    reason.trim_end_matches(", set DuplicateKeyPolicy in Options if acceptable");
                if reason.starts_with("duplicate mapping key") {
                    format!("{reason}{DUPLICATE_NOTE}")
                } else {
                    reason.to_owned()
                }
            }
        };
        match e.location() {
            Some(at) => {
                let line = first_line + usize::try_from(at.line()).unwrap_or(1) - 1;
                format!("line {line} column {}: {reason}", at.column())
            }
            None => reason,
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// A mapping nested `depth` levels deep, in block style.
    fn nested(depth: usize) -> String {
        (0..depth)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect::<String>()
            + &format!("{}leaf: 1\n", "  ".repeat(depth))
    }

    #[test]
    fn an_alias_bomb_is_refused_in_the_authors_terms() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            text += &format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            );
        }
        let error = from_str_at::<Value>(&text, 10).expect_err("9^9 nodes");
        assert!(
            error.contains("more than 250000 YAML nodes in one document"),
            "{error}"
        );
        // Where it went over, counted in the file: the document is its lines 10 to 18.
        let line: usize = error
            .strip_prefix("line ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a line number: {error}"));
        assert!((10..=18).contains(&line), "{error}");
    }

    #[test]
    fn a_non_finite_number_is_refused_saying_what_to_do() {
        for (text, value) in [("a: 1e400\n", "1e400"), ("\nb: .inf\n", ".inf")] {
            let error = from_str_at::<Value>(text, 3).expect_err(text);
            assert!(error.starts_with("line "), "{error}");
            assert!(
                error.contains(&format!("`{value}` is not a finite number"))
                    && error.ends_with("quote it if it is text"),
                "{error}"
            );
        }
        assert_eq!(
            from_str_at::<Value>("a: '1e400'\n", 1),
            Ok(serde_json::json!({"a": "1e400"}))
        );
    }

    #[test]
    fn quoted_values_continued_at_their_keys_indentation_read_as_go_yaml_reads_them() {
        let go_yaml = "spec:\n  description: \"a long text\n  that go-yaml wrote\"\n  list:\n  - name: 'it''s\n    fine'\n    note: \"a \\\" quote\n    and more\"\n  after: 1 # \"not a quote\n";
        let value: Value = from_str_at(go_yaml, 1).expect("read as kubectl reads it");
        assert_eq!(
            value["spec"]["description"],
            "a long text that go-yaml wrote"
        );
        assert_eq!(value["spec"]["list"][0]["name"], "it's fine");
        assert_eq!(value["spec"]["list"][0]["note"], "a \" quote and more");
        assert_eq!(value["spec"]["after"], 1);
        // What is wrong for go-yaml too stays an error.
        let unclosed = from_str_at::<Value>("a: \"open\nb: 1\n", 1).expect_err("unclosed");
        assert!(!unclosed.is_empty());
    }

    #[test]
    fn a_plain_scalar_holding_a_quoted_colon_leaves_wrapped_quotes_readable() {
        // The opentelemetry-operator bundle's CRD: Kubernetes' own "Must not contain ':'."
        // beside a quoted value go-yaml wrapped at its key's indentation.
        let text = "spec:\n  a: Must not contain ':'.\n  b: \"a long text\n  wrapped\"\n  c: x-y ?z 'q'\n  d: \"again\n  here\"\n";
        let value: Value = from_str_at(text, 1).expect("read as kubectl reads it");
        assert_eq!(value["spec"]["a"], "Must not contain ':'.");
        assert_eq!(value["spec"]["b"], "a long text wrapped");
        assert_eq!(value["spec"]["c"], "x-y ?z 'q'");
        assert_eq!(value["spec"]["d"], "again here");
        assert!(well_formed(text));
    }

    #[test]
    fn syntax_errors_are_told_from_documents_that_only_are_not_objects() {
        assert!(
            well_formed("a: 1\na: 2\n"),
            "a duplicate key is no syntax error"
        );
        assert!(!well_formed("a: .inf\n"), "kubectl stops at it too");
        assert!(!well_formed("a: [oops\n"));
        assert!(!well_formed("a: \"open\nb: 1\n"));
    }

    #[test]
    fn nesting_is_bounded_and_said_so() {
        let deep = from_str_at::<Value>(&nested(62), 1).expect("62 levels");
        let pointer = (0..62).map(|i| format!("/k{i}")).collect::<String>() + "/leaf";
        assert_eq!(deep.pointer(&pointer), Some(&Value::from(1)));
        let error = from_str_at::<Value>(&nested(70), 1).expect_err("70 levels");
        assert!(error.contains("nested more than 64 levels deep"), "{error}");
    }
}
