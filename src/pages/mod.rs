//! Page templates and JSON bodies for every answer vestibule writes itself.
//!
//! A page set is a folder with `startwaiting.html`, `keepwaiting.html`, `deny.html`,
//! `ratelimited.html` and `error.html`. Templates are compiled once at load (minijinja, values
//! HTML-escaped, undefined variables an error) and test-rendered with every variable, so a broken
//! template fails `--check` and reloads instead of a request. The same files ship in `pages/` and
//! are built into the binary for requests outside every room.
//!
//! `context` holds the page data, `render` loads, compiles and renders a set (with the render
//! cache in `cache`), `room` which set a room shows and its pages' variables, `json` the JSON
//! answers; which answer a request gets is the core's (`vestibule_core::wants`).

mod cache;
mod context;
mod json;
mod render;
mod room;

#[cfg(test)]
mod tests;

pub(crate) use context::{builtin_source, splice, splice_challenge, BASE_FILE, BUILTIN_BASE};
pub use context::{Estimates, PageContext, PageKind, CHALLENGE_MARK};
pub use json::json;
pub(crate) use json::{ChallengeJson, WaitingJson};
pub use render::Pages;
pub use room::{room_context, RoomPages};
pub use vestibule_core::wants::{wants, wants_json, Wants};
