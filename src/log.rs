//! One stderr line per transition, human or JSON (`--log-format`).
//!
//! Messages never contain credentials: locations are always printed through
//! their redacted form.

use std::io::Write;
use std::sync::OnceLock;

use crate::cli::LogFormat;

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Sets the format once at start-up; later calls are ignored.
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
}

/// Logs `message` as transition `event`, with extra JSON `fields`.
pub fn event(event: &str, message: &str, fields: &[(&str, serde_json::Value)]) {
    let line = match FORMAT.get().copied().unwrap_or(LogFormat::Human) {
        LogFormat::Human => format!("leaderrun: {message}\n"),
        LogFormat::Json => {
            let mut obj = serde_json::Map::new();
            obj.insert("time".into(), crate::lease::record::wall_now().into());
            obj.insert("event".into(), event.into());
            obj.insert("message".into(), message.into());
            for (k, v) in fields {
                obj.insert((*k).into(), v.clone());
            }
            format!("{}\n", serde_json::Value::Object(obj))
        }
    };
    // One write call per line so that lines from concurrent processes do not
    // interleave; a closed stderr must not stop the supervisor.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Logs a line without fields.
pub fn info(event_name: &str, message: &str) {
    event(event_name, message, &[]);
}
