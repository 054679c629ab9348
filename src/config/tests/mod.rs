//! The config's tests, by area; the helpers they share are here.

mod events;
mod file;
mod rooms;
mod rules;
mod server;

use super::*;

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, Path::new("/etc/vestibule/vestibule.toml"))
}

fn errors(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

const MINIMAL: &str = "[upstream]\npeers = [\"127.0.0.1:8000\"]\n";
