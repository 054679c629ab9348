//! vestibule's decision core: what a request is owed, decided without IO.
//!
//! Everything here is pure. It takes the clock as an argument ([`time::Timestamp`]), reads no
//! file and opens no socket, and knows nothing of Pingora or tokio; the edge (the `vestibule`
//! crate) reads requests and files, asks the core, and writes the answers. What a config names
//! on the machine (its files, a peer's addresses) the core asks of a [`config::Host`].
//!
//! The entry point is [`decide::decide`]: one request in ([`decide::Request`]), the policy in
//! service ([`decide::Policy`]: the config, key ring, rooms and rules of a generation) and the
//! time, and a [`decide::Verdict`] out.
//!
//! - [`decide`]: the decision pipeline, step by step; [`wants`]: which answer a request wants;
//!   [`api`]: which endpoint a request for the API's reserved path names.
//! - [`room`]: rooms (lottery and capacity admission, lanes, events and their schedule), routed
//!   by host and path.
//! - [`ratelimit`]: rate-limit rules (windows, buckets, the penalty box, concurrency slots).
//! - [`jwt`]: JWTs a gateway verifies with published keys; [`bearer`]: a `jwt` room's JWTs on
//!   the request path (admission by a valid one, one for each visitor let in).
//! - [`token`]: the signed room cookie: claims, signing, checking, and the caches of checked
//!   and signed values; [`cookie`]: the cookie on the wire.
//! - [`jwt`]: JWTs for an API gateway (ES256, EdDSA): the key ring that signs them and
//!   publishes its public keys (JWKS), verification against the caller's clock, and the cache
//!   of verified tokens.
//! - [`sign`]: one signing key, and how a signed value finds its key.
//! - [`keys`]: the key ring that signs tokens, challenges and invitations (parsed from text; the
//!   edge reads the file).
//! - [`identity`]: who a visitor is for the room (IP prefix, a header, a cookie).
//! - [`challenge`]: proof-of-work before a place in line.
//! - [`invite`]: invitations to presale and members' rooms.
//! - [`autopilot`]: the law that steers a capacity room's pace by its origin's health, and the
//!   per-room cell it runs in.
//! - [`controls`]: operators' live overrides of a room (pause, sold out, notice, grants).
//! - [`config`]: the configuration's schema and checks; [`problem`]: what a problem in a file
//!   is and where (file, line, key).
//! - [`store`]: the counter store's interface, the in-process store, and a cluster node's
//!   state (the Redis client is the edge's).
//! - [`sketch`], [`inflight`]: count-min counts of many keys in fixed memory, and the
//!   concurrency slots of rate-limit rules built on them; [`shard`]: a lock with a count
//!   readable without it.
//! - [`path`]: request paths, normalized once, and the origins of a path.
//! - [`time`], [`thread_cache`]: the clock's type, per-thread caches.

pub mod api;
pub mod autopilot;
pub mod bearer;
pub mod challenge;
pub mod config;
pub mod controls;
pub mod cookie;
pub mod decide;
pub mod enqueue;
pub mod history;
pub mod identity;
pub mod inflight;
pub mod invite;
pub mod jwt;
pub mod keys;
pub mod oidc;
pub mod path;
pub mod problem;
pub mod ratelimit;
pub mod room;
pub mod shard;
pub mod sign;
pub mod sketch;
pub mod store;
pub mod thread_cache;
pub mod time;
pub mod token;
pub mod wants;
