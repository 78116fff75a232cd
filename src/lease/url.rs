//! A minimal lease-URL parser: `scheme://authority/path?key=value&...`.
//!
//! Each backend turns a [`LeaseUrl`] into its own location type and decides
//! which query keys it accepts; this module only splits and decodes, and knows
//! how to print a URL without secrets.

/// Query keys whose values may be shown in logs; every other value is masked.
const PUBLIC_KEYS: &[&str] = &["endpoint", "region", "path_style"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseUrl {
    pub scheme: String,
    /// The part between `://` and the next `/` (a bucket, an account, empty
    /// for `file:///path`). User info (`user:secret@`) is dropped on display.
    pub authority: String,
    /// Everything from the first `/` after the authority, percent-decoded.
    pub path: String,
    /// Decoded query pairs in order.
    pub query: Vec<(String, String)>,
}

impl LeaseUrl {
    pub fn parse(raw: &str) -> Result<LeaseUrl, String> {
        let raw = raw.trim();
        let (scheme, rest) = raw
            .split_once("://")
            .ok_or_else(|| format!("'{}' is not a URL (expected SCHEME://..., e.g. file:///var/lib/leases/job or s3://bucket/key)", redact_raw(raw)))?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
        {
            return Err(format!("'{}' has no valid scheme", redact_raw(raw)));
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i..]),
            None => (before_query, ""),
        };
        let mut pairs = Vec::new();
        if let Some(q) = query {
            for part in q.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = part.split_once('=').unwrap_or((part, ""));
                pairs.push((decode(k)?, decode(v)?));
            }
        }
        Ok(LeaseUrl {
            scheme: scheme.to_ascii_lowercase(),
            authority: authority.to_owned(),
            path: decode(path)?,
            query: pairs,
        })
    }

    /// The value of query key `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Fails on any query key not in `allowed`, naming it.
    pub fn only_keys(&self, allowed: &[&str]) -> Result<(), String> {
        for (k, _) in &self.query {
            if !allowed.contains(&k.as_str()) {
                return Err(format!(
                    "unknown option '{k}' in {} URL (accepted: {})",
                    self.scheme,
                    if allowed.is_empty() {
                        "none".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ));
            }
        }
        Ok(())
    }

    /// The authority without user info.
    pub fn host(&self) -> &str {
        self.authority
            .rsplit_once('@')
            .map(|(_, h)| h)
            .unwrap_or(&self.authority)
    }

    /// The URL for logs and `status`: user info dropped, secret values masked.
    pub fn redacted(&self) -> String {
        let mut out = format!("{}://{}{}", self.scheme, self.host(), self.path);
        for (i, (k, v)) in self.query.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(k);
            out.push('=');
            out.push_str(if PUBLIC_KEYS.contains(&k.as_str()) {
                v
            } else {
                "***"
            });
        }
        out
    }
}

/// A raw string that failed to parse, with anything after `?` or before `@` masked.
fn redact_raw(raw: &str) -> String {
    let no_query = raw.split('?').next().unwrap_or("");
    match (no_query.find("://"), no_query.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            format!("{}://***@{}", &no_query[..s], &no_query[at + 1..])
        }
        _ => no_query.to_owned(),
    }
}

fn decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .ok_or("truncated percent-escape in URL")?;
                let b = u8::from_str_radix(hex, 16)
                    .map_err(|_| format!("bad percent-escape '%{hex}' in URL"))?;
                out.push(b);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "URL is not valid UTF-8 after decoding".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_and_s3() {
        let u = LeaseUrl::parse("file:///var/lib/a%20b").unwrap();
        assert_eq!(
            (u.scheme.as_str(), u.authority.as_str(), u.path.as_str()),
            ("file", "", "/var/lib/a b")
        );
        let u = LeaseUrl::parse("s3://bkt/dir/key?endpoint=http://127.0.0.1:9000&path_style=true")
            .unwrap();
        assert_eq!(u.host(), "bkt");
        assert_eq!(u.path, "/dir/key");
        assert_eq!(u.get("endpoint"), Some("http://127.0.0.1:9000"));
        assert_eq!(u.get("path_style"), Some("true"));
    }

    #[test]
    fn redacts_secrets() {
        let u = LeaseUrl::parse("s3://user:hunter2@bkt/k?region=eu-west-1&sas=sig%3Dabc").unwrap();
        let shown = u.redacted();
        assert!(
            !shown.contains("hunter2") && !shown.contains("abc"),
            "{shown}"
        );
        assert!(shown.contains("region=eu-west-1"), "{shown}");
        let err = LeaseUrl::parse("nourl:hunter2@x?sig=abc").unwrap_err();
        assert!(!err.contains("abc"), "{err}");
    }

    #[test]
    fn rejects_garbage() {
        assert!(LeaseUrl::parse("not a url").is_err());
        assert!(LeaseUrl::parse("://x").is_err());
        assert!(LeaseUrl::parse("file:///a%zz").is_err());
    }
}
