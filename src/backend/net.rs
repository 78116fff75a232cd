//! Error helpers shared by the backends that talk to a server over HTTPS.

/// The error and its sources on one line, without duplicates.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        let s = e.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ").replace('\n', " ")
}

/// A TLS failure that retrying cannot fix: a certificate the client refuses,
/// TLS spoken to a plain-HTTP port, a handshake the server rejects. A
/// connection closed or reset during the handshake ("tls handshake eof") is
/// not one of them: that happens during outages and is retried.
pub(crate) fn is_tls_failure(chain: &str) -> bool {
    let c = chain.to_ascii_lowercase();
    [
        "invalid peer certificate",
        "certificate verify",
        "unknownissuer",
        "notvalidforname",
        "invalidcontenttype",
        "received corrupt message",
        "peer is incompatible",
        "peer misbehaved",
        "received fatal alert",
        "wrong version number",
    ]
    .iter()
    .any(|needle| c.contains(needle))
}
