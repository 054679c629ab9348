//! What a configuration problem is, and where it is: the error type every parser of a file
//! returns (file, line, key), and the locator that finds a key's line in TOML text.

pub mod error;
pub mod locate;
