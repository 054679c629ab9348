//! The bodies of the `vestibule` subcommands; `main.rs` keeps the command line's definition and
//! calls one of these per subcommand. Each is a thin layer over the library: it reads the config,
//! calls into `vestibule`, and prints.

pub(crate) mod ctl;
pub(crate) mod init;
pub(crate) mod invite;
pub(crate) mod man;
pub(crate) mod pages;
pub(crate) mod probe;
pub(crate) mod report;
pub mod run;
#[cfg(feature = "tools")]
pub mod simulate;
pub(crate) mod token;
pub(crate) mod verify_draw;
