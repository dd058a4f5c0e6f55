//! Registry credentials: a pull secret's `.dockerconfigjson`, and the registry's challenge.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// The `Authorization: Basic` value.
    pub fn basic(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password);
        format!("Basic {}", STANDARD.encode(pair))
    }

    /// The credentials for `registry` in a Docker config (`.dockerconfigjson` of a
    /// `kubernetes.io/dockerconfigjson` Secret, or `~/.docker/config.json`): `None` when it
    /// has no entry for that registry.
    pub fn from_docker_config(json: &[u8], registry: &str) -> Result<Option<Self>, String> {
        #[derive(serde::Deserialize)]
        struct Config {
            #[serde(default)]
            auths: std::collections::BTreeMap<String, Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            auth: Option<String>,
            username: Option<String>,
            password: Option<String>,
        }
        let config: Config = serde_json::from_slice(json)
            .map_err(|e| format!("not a Docker config (.dockerconfigjson): {e}"))?;
        let wanted = normalize(registry);
        let Some((key, entry)) = config
            .auths
            .iter()
            .find(|(key, _)| normalize(key) == wanted)
        else {
            return Ok(None);
        };
        if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
            return Ok(Some(Self {
                username: username.clone(),
                password: password.clone(),
            }));
        }
        let Some(auth) = &entry.auth else {
            return Err(format!(
                "auths.{key:?}: neither auth nor username and password"
            ));
        };
        let decoded = STANDARD
            .decode(auth.trim())
            .map_err(|e| format!("auths.{key:?}.auth: not base64: {e}"))?;
        let text = String::from_utf8(decoded)
            .map_err(|_| format!("auths.{key:?}.auth: not UTF-8 once decoded"))?;
        let Some((username, password)) = text.split_once(':') else {
            return Err(format!(
                "auths.{key:?}.auth: not user:password once decoded"
            ));
        };
        Ok(Some(Self {
            username: username.to_owned(),
            password: password.to_owned(),
        }))
    }
}

/// A config key as a bare `host[:port]`: schemes and paths dropped, Docker Hub's aliases
/// made one.
fn normalize(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}

/// A `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// Send credentials with HTTP basic authentication.
    Basic,
    /// Get a token from `realm` (with `service` and `scope`) and send it as a bearer token.
    Bearer {
        /// The token endpoint.
        realm: String,
        /// Its `service` parameter.
        service: Option<String>,
        /// Its `scope` parameter.
        scope: Option<String>,
    },
}

impl Challenge {
    /// Parses a `WWW-Authenticate` header value; `None` for a scheme this client does not speak.
    pub fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Self::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = parameters(params);
        let get = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        Some(Self::Bearer {
            realm: get("realm")?,
            service: get("service"),
            scope: get("scope"),
        })
    }
}

/// `a="x", b=y` as pairs; quoted values may hold commas and `\"`.
fn parameters(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let name: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ','))
            .collect::<String>()
            .trim()
            .to_owned();
        if name.is_empty() || chars.next() != Some('=') {
            return out;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = std::iter::from_fn(|| chars.next_if(|c| *c != ','))
                .collect::<String>()
                .trim()
                .to_owned();
        }
        out.push((name, value));
        if out.len() >= 16 {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_configs_give_the_registry_its_credentials() {
        let auth = STANDARD.encode("robot:s3cr:et");
        let json = format!(
            r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{auth}"}},
                "127.0.0.1:5000": {{"username": "u", "password": "p"}}}}}}"#
        );
        let hub = Credentials::from_docker_config(json.as_bytes(), "docker.io")
            .expect("valid")
            .expect("entry");
        assert_eq!(
            (hub.username.as_str(), hub.password.as_str()),
            ("robot", "s3cr:et")
        );
        assert_eq!(
            hub.basic(),
            format!("Basic {}", STANDARD.encode("robot:s3cr:et"))
        );
        let local = Credentials::from_docker_config(json.as_bytes(), "127.0.0.1:5000")
            .expect("valid")
            .expect("entry");
        assert_eq!(local.username, "u");
        assert!(
            !format!("{local:?}").contains("\"p\""),
            "the password is never printed"
        );
        assert_eq!(
            Credentials::from_docker_config(json.as_bytes(), "ghcr.io").expect("valid"),
            None
        );
        let error = Credentials::from_docker_config(br#"{"auths": {"h": {"auth": "%%"}}}"#, "h")
            .expect_err("bad base64");
        assert!(error.contains("auths.\"h\".auth: not base64"), "{error}");
        assert!(Credentials::from_docker_config(b"42", "h").is_err());
    }

    #[test]
    fn challenges_are_parsed_with_quoted_parameters() {
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://auth.example/token",service="reg, one",scope="repository:a/b:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("reg, one".into()),
                scope: Some("repository:a/b:pull".into()),
            })
        );
        assert_eq!(Challenge::parse("Bearer service=x"), None, "no realm");
        assert_eq!(Challenge::parse("Negotiate abc"), None);
    }
}
