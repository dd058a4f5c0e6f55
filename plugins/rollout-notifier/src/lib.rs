//! Posts a JSON message to a webhook when a Deployment's rollout stalls (its `Progressing`
//! condition turns to reason `ProgressDeadlineExceeded`). Configuration:
//! `{"url": "https://hooks.example.com/rollouts"}`; the operator must list the webhook's host
//! in the plugin's `grants.http`, or every request is refused.
//!
//! HTTP goes through `wasi:http/outgoing-handler`; the host ends every request at the call's
//! deadline and caps both bodies.

use std::sync::OnceLock;

use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Object, Plugin, Subscription, export_plugin, log,
};
use serde::Deserialize;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    url: String,
}

/// The webhook, split as `wasi:http` wants it.
struct Webhook {
    https: bool,
    authority: String,
    path: String,
}

impl Webhook {
    fn parse(url: &str) -> Result<Self, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!("url {url:?}: must start with http:// or https://"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("url {url:?}: no host"));
        }
        Ok(Self {
            https,
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }

    /// POSTs `body` as JSON; the response's status code.
    fn post(&self, body: &[u8]) -> Result<u16, HttpError> {
        let headers = Fields::from_list(&[("content-type".into(), b"application/json".to_vec())])
            .map_err(|e| HttpError::Local(format!("headers: {e:?}")))?;
        let request = OutgoingRequest::new(headers);
        let local = |what: &str| HttpError::Local(what.to_owned());
        request
            .set_method(&Method::Post)
            .map_err(|()| local("method"))?;
        let scheme = if self.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| local("scheme"))?;
        request
            .set_authority(Some(&self.authority))
            .map_err(|()| local("authority"))?;
        request
            .set_path_with_query(Some(&self.path))
            .map_err(|()| local("path"))?;
        let outgoing = request.body().map_err(|()| local("body"))?;
        let response = outgoing_handler::handle(request, None).map_err(HttpError::Refused)?;
        // A refused request closes the body: its reason is in the response, so that is read
        // even when writing failed.
        let written = (|| {
            let stream = outgoing.write().map_err(|()| "no body stream".to_owned())?;
            for chunk in body.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|e| format!("writing the body: {e:?}"))?;
            }
            drop(stream);
            OutgoingBody::finish(outgoing, None).map_err(|e| format!("finishing the body: {e:?}"))
        })();
        response.subscribe().block();
        match (response.get(), written) {
            (Some(Ok(Err(code))), _) => Err(HttpError::Refused(code)),
            (_, Err(what)) => Err(HttpError::Local(what)),
            (Some(Ok(Ok(answer))), Ok(())) => Ok(answer.status()),
            (Some(Err(())) | None, Ok(())) => Err(local("no response")),
        }
    }
}

enum HttpError {
    /// The host or the network refused or failed the request.
    Refused(ErrorCode),
    /// The request could not be built.
    Local(String),
}

static CONFIG: OnceLock<Webhook> = OnceLock::new();

/// The `Progressing` condition's reason and message, when it is `ProgressDeadlineExceeded`.
fn stalled(deployment: &Object) -> Result<Option<String>, HandleError> {
    #[derive(Deserialize)]
    struct Condition {
        #[serde(rename = "type")]
        kind: String,
        reason: Option<String>,
        message: Option<String>,
    }
    let Some(conditions) = deployment.field("/status/conditions")? else {
        return Ok(None);
    };
    let conditions: Vec<Condition> = conditions
        .parse()
        .map_err(|e| HandleError::fatal(format!("status.conditions: {e}")))?;
    Ok(conditions
        .into_iter()
        .find(|c| {
            c.kind == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        })
        .map(|c| c.message.unwrap_or_default()))
}

struct RolloutNotifier;

impl Plugin for RolloutNotifier {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        let _ = CONFIG.set(Webhook::parse(&config.url)?);
        Ok(())
    }

    fn describe() -> Manifest {
        Manifest::new().subscribe(Subscription::to(Gvk::deployment()))
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let (deployment, was_stalled) = match &event {
            Event::Added(a) => (a.object, false),
            Event::Updated(u) => (u.new, stalled(u.old)?.is_some()),
            Event::Deleted(_) | Event::Sync(_) | Event::Requeue(_) => return Ok(()),
        };
        let Some(message) = stalled(deployment)? else {
            return Ok(());
        };
        if was_stalled {
            return Ok(());
        }
        let Some(webhook) = CONFIG.get() else {
            return Err(HandleError::fatal("not initialised"));
        };
        let key = deployment.key();
        let body = serde_json::json!({
            "text": format!("rollout of {key} stalled: {message}"),
            "deployment": key,
            "reason": "ProgressDeadlineExceeded",
        });
        match webhook.post(body.to_string().as_bytes()) {
            Ok(status) if (200..300).contains(&status) => {
                log::info(
                    "notified",
                    &[("deployment", &key), ("status", &status.to_string())],
                );
                Ok(())
            }
            Ok(status) => Err(HandleError::retry(format!("webhook answered {status}"))),
            Err(HttpError::Refused(ErrorCode::HttpRequestDenied)) => Err(HandleError::fatal(
                "webhook host not granted: add it to this plugin's grants.http",
            )),
            Err(HttpError::Refused(code)) => Err(HandleError::retry(format!("webhook: {code:?}"))),
            Err(HttpError::Local(what)) => {
                Err(HandleError::fatal(format!("webhook request: {what}")))
            }
        }
    }
}

export_plugin!(RolloutNotifier);
