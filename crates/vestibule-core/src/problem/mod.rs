//! What a problem in a file is, and where: the error every parser of a file returns (file,
//! line, key), and the locator that finds a key's line in TOML text. The config and the key
//! ring report through it; `config::{error, locate}` name the same modules.

pub mod error;
pub mod locate;
