//! The files that ship around the binary: every path the Dockerfile copies exists, and the
//! sample config is valid.

use std::path::Path;

#[test]
fn dockerfile_copies_only_existing_paths() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let mut copies = 0;
    for line in dockerfile.lines() {
        let Some(rest) = line.trim().strip_prefix("COPY ") else {
            continue;
        };
        if rest.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(
                root.join(src).exists(),
                "Dockerfile copies {src}, which does not exist"
            );
            copies += 1;
        }
    }
    assert!(copies >= 4, "expected COPY lines in the Dockerfile");
    assert!(
        dockerfile.contains("USER vestibule"),
        "the image must not run as root"
    );
    assert!(dockerfile.contains("EXPOSE 8080 9901"));
}
