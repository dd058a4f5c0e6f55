//! Reviews recorded as they are answered (`admission.recordReviews`): each plugin's reviews
//! appended to `DIR/<plugin>.reviews.test.yaml`, a test file whose steps are the reviews, so
//! a new version can be checked against real traffic with
//! `kubewasm test --compare OLD.wasm NEW.wasm DIR/<plugin>.reviews.test.yaml`. A Secret's
//! `data` and `stringData` are left out. Written after the answer has gone, on the review's
//! pool thread; a file stops growing at [`MAX_FILE_BYTES`].

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

use super::review::Review;

/// The most a recording of one plugin's reviews grows to; later reviews are not recorded.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// One recording file, open for appending.
struct Recording {
    file: std::fs::File,
    bytes: u64,
    full: bool,
}

/// Where reviews are recorded, by plugin.
pub struct ReviewRecorder {
    dir: PathBuf,
    files: Mutex<HashMap<String, Recording>>,
}

/// A Secret's values are not recorded.
fn without_secrets(object: Value) -> Value {
    let mut object = object;
    if object.get("kind").and_then(Value::as_str) == Some("Secret")
        && let Value::Object(fields) = &mut object
    {
        fields.remove("data");
        fields.remove("stringData");
    }
    object
}

/// `review` as a step of a test file (YAML: one line of JSON, a flow mapping).
pub fn step(review: &Review) -> String {
    let r = &review.request;
    let object = |o: &Option<std::sync::Arc<crate::object::KubeObject>>| {
        o.as_ref()
            .and_then(|o| serde_json::from_str::<Value>(&o.json()).ok())
            .map(without_secrets)
    };
    let target = r.object_name();
    let mut body = json!({
        "operation": r.operation.as_str(),
        "dryRun": r.dry_run,
        "user": r.username,
    });
    if let Some(o) = object(&r.object) {
        body["object"] = o;
    }
    if let Some(o) = object(&r.old_object) {
        body["oldObject"] = o;
    }
    let name = json!(format!(
        "review {} {target} ({})",
        r.operation.as_str(),
        r.uid
    ));
    format!("  - name: {name}\n    review: {body}\n")
}

impl ReviewRecorder {
    /// Records into `dir`, made if need be.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            files: Mutex::default(),
        })
    }

    /// The file plugin `plugin`'s reviews go to.
    pub fn file_of(&self, plugin: &str) -> PathBuf {
        self.dir.join(format!("{plugin}.reviews.test.yaml"))
    }

    /// Appends `review`, which plugin `plugin` answered.
    pub fn record(&self, plugin: &str, review: &Review) {
        let text = step(review);
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if !files.contains_key(plugin) {
            match self.open(plugin) {
                Ok(r) => {
                    files.insert(plugin.to_owned(), r);
                }
                Err(e) => {
                    tracing::warn!(plugin, dir = %self.dir.display(), "cannot record reviews: {e}");
                    return;
                }
            }
        }
        let Some(r) = files.get_mut(plugin) else {
            return;
        };
        if r.full {
            return;
        }
        if r.bytes + text.len() as u64 > MAX_FILE_BYTES {
            r.full = true;
            tracing::warn!(
                plugin,
                "review recording reached {MAX_FILE_BYTES} bytes: later reviews are not recorded"
            );
            return;
        }
        match r.file.write_all(text.as_bytes()) {
            Ok(()) => r.bytes += text.len() as u64,
            Err(e) => {
                r.full = true;
                tracing::warn!(plugin, "cannot record reviews: {e}");
            }
        }
    }

    /// The plugin's file, with the test file's header when it is new.
    fn open(&self, plugin: &str) -> std::io::Result<Recording> {
        let path = self.file_of(plugin);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let mut bytes = file.metadata()?.len();
        if bytes == 0 {
            let header = format!(
                "# Admission reviews plugin {plugin} answered, recorded by kubewasm \
                 (admission.recordReviews).\n# Replay: kubewasm test --compare OLD.wasm NEW.wasm \
                 THIS-FILE (the cluster's objects are not recorded: add `cluster:` for a policy \
                 that reads them).\nname: {plugin}\nplugin: {plugin}.wasm\nsteps:\n"
            );
            file.write_all(header.as_bytes())?;
            bytes = header.len() as u64;
        }
        Ok(Recording {
            file,
            bytes,
            full: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(kind: &str, object: Value) -> Review {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": "things"},
                "operation": "CREATE",
                "namespace": "shop",
                "name": "a",
                "userInfo": {"username": "alice"},
                "object": object,
                "dryRun": false
            }
        });
        super::super::review::parse(body.to_string().as_bytes()).expect("a review")
    }

    #[test]
    fn reviews_append_to_one_test_file_per_plugin_without_secret_values() {
        let dir = tempfile::tempdir().expect("temp dir");
        let recorder = ReviewRecorder::new(&dir.path().join("reviews")).expect("made");
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "a", "namespace": "shop"},
            "data": {"password": "c2VjcmV0"}, "stringData": {"token": "t"}});
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "shop"}});
        recorder.record("policy", &review("Secret", secret));
        recorder.record("policy", &review("Pod", pod));
        let text = std::fs::read_to_string(recorder.file_of("policy")).expect("written");
        assert!(
            text.contains("name: policy\nplugin: policy.wasm\nsteps:\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("  - name: \"review CREATE ").count(),
            2,
            "{text}"
        );
        assert!(text.contains(r#""user":"alice""#), "{text}");
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("token"),
            "{text}"
        );
        // Each step is one line of JSON: the file reads as YAML.
        let yaml: serde_json::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(yaml["steps"][1]["review"]["object"]["kind"], "Pod");
    }
}
