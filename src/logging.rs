//! Process logging: plain or JSON lines on stderr.
//!
//! The level comes from `[log] level`, and `VESTIBULE_LOG` (env_logger filter syntax, e.g.
//! `debug` or `info,pingora=warn`) overrides it. Access lines use the target
//! `vestibule::access` and are always let through the filter; whether they are written at all is
//! `[log] access`, read per request so a reload can turn them on or off.

use std::io::Write;

use crate::config::{LogConfig, LogFormat};
use crate::time::Timestamp;

/// The environment variable that overrides the configured level.
pub const ENV_FILTER: &str = "VESTIBULE_LOG";
/// The target of access lines.
pub const ACCESS_TARGET: &str = "vestibule::access";

/// Installs the logger. Safe to call once; later calls do nothing.
pub fn init(config: &LogConfig) {
    let mut builder = env_logger::Builder::new();
    builder.filter_level(config.level);
    // Pingora is chatty at info about every connection it pools.
    builder.filter_module("pingora_core::connectors", log::LevelFilter::Warn);
    if let Ok(spec) = std::env::var(ENV_FILTER) {
        builder.parse_filters(&spec);
    }
    builder.filter_module(ACCESS_TARGET, log::LevelFilter::Info);
    match config.format {
        LogFormat::Plain => builder.format(|buf, record| {
            writeln!(
                buf,
                "{} {:<5} {}: {}",
                Timestamp::now().rfc3339(),
                record.level(),
                record.target(),
                record.args()
            )
        }),
        LogFormat::Json => builder.format(|buf, record| {
            let line = serde_json::json!({
                "ts": Timestamp::now().rfc3339(),
                "level": record.level().as_str(),
                "target": record.target(),
                "msg": record.args().to_string(),
            });
            writeln!(buf, "{line}")
        }),
    };
    let _ = builder.try_init();
}
