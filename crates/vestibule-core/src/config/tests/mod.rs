//! The config's tests, by area; the helpers they share are here.

mod events;
mod file;
mod rooms;
mod rules;
mod server;
mod sinks;

use super::*;

/// The test machine's own files (tests write theirs to temporary folders), and literal peer
/// addresses only.
struct Disk;

impl Host for Disk {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn resolve(&self, name: &str) -> std::io::Result<Vec<SocketAddr>> {
        literal_address(name)
    }

    fn check_store_url(&self, url: &str) -> Result<(), String> {
        testing::Bare.check_store_url(url)
    }
}

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, Path::new("/etc/vestibule/vestibule.toml"), &Disk)
}

fn errors(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

const MINIMAL: &str = "[upstream]\npeers = [\"127.0.0.1:8000\"]\n";
