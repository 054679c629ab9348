//! `vestibule token inspect`: what a cookie's token says, and whether it verifies.

use std::path::Path;
use std::process::ExitCode;

pub(crate) fn inspect_token(path: &Path, value: &str, uid: Option<&str>) -> ExitCode {
    let loaded = vestibule::config::load(path)
        .and_then(|config| vestibule::keys::load(&config.keys_file).map(|ring| (config, ring)));
    let (config, ring) = match loaded {
        Ok(loaded) => loaded,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let uid = uid.map(|u| match u.parse::<std::net::IpAddr>() {
        Ok(ip) => vestibule::identity::Identity::of_ip(ip, config.identity.ipv6_prefix),
        Err(_) => vestibule::identity::Identity::from_encoded(u),
    });
    let (report, valid) =
        vestibule::inspect::inspect(value, &ring, uid.as_ref(), vestibule::time::now());
    print!("{report}");
    if valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
