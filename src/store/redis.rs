//! The Redis (or Valkey) side of a [`SharedStore`](super::shared::SharedStore): one Lua script
//! per sync (`sync.lua`), so a node's sync is one round trip whatever the request rate, and
//! atomic.
//!
//! Layout under `key_prefix` (default `vestibule:`):
//!
//! - `nodes`: a sorted set of live members, scored by their last sync (ms);
//! - `c|kind|slot|id|room`: one hash per counter, a field per member holding that member's
//!   absolute value, expiring with the counter (`PEXPIREAT`);
//! - `keys`: a sorted set indexing the live counters by expiry;
//! - `demand|room`: a hash of each member's demand over the last minute;
//! - `marks`: a stream of marks (revoked sessions, counted winners, shared penalty boxes),
//!   capped at ~100k entries;
//! - `seed`: the secret every node hashes shared rate-limit keys with (set once, by the first
//!   node to sync).
//!
//! Nothing needs persistence: every node pushes all its live counters after a failure, when
//! the store did not know it (a restart without data), and every 30 s.
//!
//! Every key carries the prefix as a hash tag (`{vestibule:}nodes`, ...), so on Redis Cluster
//! the whole state lives in one slot and the script, which declares the `nodes` key, runs where
//! that slot lives. (The state is small: one shard carries it easily; see the cluster chapter of the docs.)
//! With one URL it talks to one server (or a primary behind Sentinel or a managed failover
//! address); with several, they are the seed nodes of a Redis Cluster.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Script, Value};

use super::shared::{SyncReply, SyncRequest};

const SCRIPT: &str = include_str!("sync.lua");

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from the store: {0}")]
    Reply(&'static str),
}

/// A connection to the store, opened on first use and again after a failure.
pub struct RedisSync {
    client: Client,
    prefix: String,
    script: Script,
    conn: tokio::sync::Mutex<Option<Conn>>,
}

enum Client {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// Bytes on the wire of one sync, roughly (arguments and reply payloads).
#[derive(Clone, Copy, Debug, Default)]
pub struct Traffic {
    pub sent: usize,
    pub received: usize,
}

impl RedisSync {
    /// One URL: a server; several: the seed nodes of a Redis Cluster.
    pub fn new(urls: &[String], prefix: &str) -> Result<RedisSync, redis::RedisError> {
        let client = match urls {
            [url] => Client::Single(redis::Client::open(url.as_str())?),
            _ => Client::Cluster(Box::new(redis::cluster::ClusterClient::new(
                urls.iter().map(String::as_str),
            )?)),
        };
        Ok(RedisSync {
            client,
            prefix: format!("{{{prefix}}}"),
            script: Script::new(SCRIPT),
            conn: tokio::sync::Mutex::new(None),
        })
    }

    /// One sync, within `timeout` (connecting included).
    pub async fn exchange(
        &self,
        req: &SyncRequest,
        timeout: Duration,
    ) -> Result<(SyncReply, Traffic), SyncError> {
        match tokio::time::timeout(timeout, self.exchange_inner(req)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                *self.conn.lock().await = None;
                Err(e)
            }
            Err(_) => {
                *self.conn.lock().await = None;
                Err(SyncError::Timeout(timeout))
            }
        }
    }

    async fn exchange_inner(&self, req: &SyncRequest) -> Result<(SyncReply, Traffic), SyncError> {
        let mut guard = self.conn.lock().await;
        if guard.is_none() {
            *guard = Some(match &self.client {
                Client::Single(c) => Conn::Single(c.get_multiplexed_async_connection().await?),
                Client::Cluster(c) => Conn::Cluster(c.get_async_connection().await?),
            });
        }
        let Some(conn) = guard.as_mut() else {
            return Err(SyncError::Reply("no connection"));
        };
        let mut inv = self.script.prepare_invoke();
        // The key the script is routed by (Redis Cluster): every other key shares its slot.
        inv.key(format!("{}nodes", self.prefix));
        let mut sent = 0usize;
        let mut arg = |inv: &mut redis::ScriptInvocation<'_>, s: String| {
            sent += s.len() + 16;
            inv.arg(s);
        };
        arg(&mut inv, self.prefix.clone());
        arg(&mut inv, req.member.clone());
        arg(&mut inv, req.now_ms.to_string());
        arg(&mut inv, req.dead_after_ms.to_string());
        arg(&mut inv, req.counters.len().to_string());
        for (k, v, exp) in &req.counters {
            arg(&mut inv, k.clone());
            arg(&mut inv, v.to_string());
            arg(&mut inv, exp.to_string());
        }
        arg(&mut inv, req.demand.len().to_string());
        for (room, d) in &req.demand {
            arg(&mut inv, room.clone());
            arg(&mut inv, d.to_string());
        }
        arg(&mut inv, req.marks.len().to_string());
        for (m, until) in &req.marks {
            arg(&mut inv, m.clone());
            arg(&mut inv, until.to_string());
        }
        arg(&mut inv, req.mark_cursor.clone());
        arg(&mut inv, req.seed_candidate.clone());
        arg(&mut inv, req.controls.len().to_string());
        for (room, version, doc) in &req.controls {
            arg(&mut inv, room.clone());
            arg(&mut inv, version.to_string());
            arg(&mut inv, doc.clone());
        }
        arg(&mut inv, req.controls_seen.to_string());
        for list in [&req.registers, &req.blocks] {
            arg(&mut inv, list.len().to_string());
            for (k, v) in list {
                arg(&mut inv, k.clone());
                arg(&mut inv, v.to_string());
            }
        }
        let value: Value = match conn {
            Conn::Single(c) => invoke(&inv, c).await?,
            Conn::Cluster(c) => invoke(&inv, c).await?,
        };
        let mut received = 0usize;
        let reply = parse_reply(&value, &mut received)?;
        Ok((reply, Traffic { sent, received }))
    }
}

async fn invoke<C: ConnectionLike>(
    inv: &redis::ScriptInvocation<'_>,
    conn: &mut C,
) -> Result<Value, redis::RedisError> {
    inv.invoke_async(conn).await
}

fn text(v: &Value, bytes: &mut usize) -> Result<String, SyncError> {
    match v {
        Value::BulkString(b) => {
            *bytes += b.len() + 8;
            String::from_utf8(b.clone()).map_err(|_| SyncError::Reply("not UTF-8"))
        }
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        _ => Err(SyncError::Reply("expected a string")),
    }
}

fn number<T: std::str::FromStr>(v: &Value, bytes: &mut usize) -> Result<T, SyncError> {
    let s = text(v, bytes)?;
    // Lua may render a count as a float ("3" or "3.0").
    let s = s.strip_suffix(".0").unwrap_or(&s);
    s.parse().map_err(|_| SyncError::Reply("expected a number"))
}

fn array(v: &Value) -> Result<&[Value], SyncError> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Nil => Ok(&[]),
        _ => Err(SyncError::Reply("expected an array")),
    }
}

fn pairs<A, B>(
    v: &Value,
    bytes: &mut usize,
    mut f: impl FnMut(&Value, &Value, &mut usize) -> Result<(A, B), SyncError>,
) -> Result<Vec<(A, B)>, SyncError> {
    let a = array(v)?;
    let mut out = Vec::with_capacity(a.len() / 2);
    for p in a.chunks(2) {
        if let [x, y] = p {
            out.push(f(x, y, bytes)?);
        }
    }
    Ok(out)
}

fn parse_reply(v: &Value, bytes: &mut usize) -> Result<SyncReply, SyncError> {
    let parts = array(v)?;
    let [registered, members, counters, demand, marks, cursor, seed, controls, generation, registers, blocks] =
        parts
    else {
        return Err(SyncError::Reply("expected eleven parts"));
    };
    let controls = pairs(controls, bytes, |room, value, b| {
        let value = text(value, b)?;
        let (version, doc) = value
            .split_once('|')
            .ok_or(SyncError::Reply("overrides without a version"))?;
        let version = version
            .parse()
            .map_err(|_| SyncError::Reply("an overrides version is not a number"))?;
        Ok((text(room, b)?, (version, doc.to_owned())))
    })?
    .into_iter()
    .map(|(room, (version, doc))| (room, version, doc))
    .collect();
    let registered = matches!(registered, Value::Int(1));
    let members = array(members)?
        .iter()
        .map(|m| text(m, bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let counters = pairs(counters, bytes, |k, v, b| Ok((text(k, b)?, number(v, b)?)))?;
    let demand = pairs(demand, bytes, |room, by, b| {
        let by = pairs(by, b, |m, d, b| Ok((text(m, b)?, number(d, b)?)))?;
        Ok((text(room, b)?, by))
    })?;
    let marks = pairs(marks, bytes, |m, u, b| Ok((text(m, b)?, number(u, b)?)))?;
    let registers = pairs(registers, bytes, |k, v, b| Ok((text(k, b)?, number(v, b)?)))?;
    let blocks = pairs(blocks, bytes, |r, v, b| Ok((text(r, b)?, number(v, b)?)))?;
    Ok(SyncReply {
        registers,
        blocks,
        registered,
        members,
        counters,
        demand,
        marks,
        mark_cursor: text(cursor, bytes)?,
        seed: text(seed, bytes)?,
        controls,
        controls_generation: number(generation, bytes)?,
    })
}
