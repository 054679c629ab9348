//! A waiting visitor's stream, decided on nothing: `GET {api_prefix}/rooms/<room>/stream`
//! tells a visitor where they stand and when it is their turn, and they come in by their next
//! request, as they would by polling.
//!
//! [`Room::watch`] reads the visitor's cookie once, when the stream opens; [`Room::tell`] is
//! asked about once a second and answers [`Tell`]; [`Room::unwatch`] ends the watch. The edge
//! holds the stream; the room holds nothing for it but what a [`Watch`] carries.
//!
//! - **Capacity rooms** (fifo and random): the stream checks in for the visitor on their
//!   token's schedule, and says [`Tell::Turn`] once their request would get in
//!   ([`capacity::Watched`]).
//! - **Lottery rooms**: their draw is due at their token's `exp`; the stream says
//!   [`Tell::Turn`] then, while the room is open, and ends otherwise.
//!
//! Anything that would change the answer a watch was opened under (the event in force, the
//! room's kind, its key) ends it ([`Tell::End`]): the page then asks again itself.

use std::sync::Arc;

use crate::config::Admission as AdmissionConfig;
use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::time::Timestamp;
use crate::token::Dec;

use super::capacity::Watched;
use super::event::EventState;
use super::page::Estimates;
use super::{Hold, Presented, Room};

/// The longest a stream runs before the page asks again itself, seconds: a bound on what one
/// visitor holds, and a fresh cookie now and then.
pub const MAX_WATCH_SECS: u64 = 600;

/// What a stream tells its visitor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tell {
    /// Their next request lets them in.
    Turn,
    /// Not yet: how many are ahead (fifo) and the wait estimates, when known.
    Wait {
        users_ahead: Option<u64>,
        estimates: Estimates,
    },
    /// The stream ends without a turn: the page asks again itself.
    End,
}

/// Why a stream cannot watch a visitor: their page polls instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwatched {
    /// The room is off, or the visitor is not waiting in it (no valid wait token: admitted,
    /// new, or their token is not this room's).
    NotWaiting,
    /// An event's pre-queue is open: nobody's turn comes before the start.
    PreQueue,
}

/// One visitor's watch: what their cookie said when the stream opened, and what the stream has
/// counted for them since.
#[derive(Clone, Debug)]
pub struct Watch {
    kind: Kind,
    /// The running event the watch was opened under (its name), if any.
    event: Option<Arc<str>>,
    /// When the stream ends without a turn, Unix seconds.
    until: u64,
    /// Names the wait token watched (from its signature): one stream per token.
    key: u64,
}

#[derive(Clone, Debug)]
enum Kind {
    /// A lottery's wait token: drawn at `exp`.
    Lottery {
        exp: u64,
    },
    Capacity(Box<Watched>),
}

impl Watch {
    /// When the stream ends at the latest, Unix seconds.
    pub fn until(&self) -> u64 {
        self.until
    }

    /// The wait token watched, as a number: two streams with the same key watch one visitor's
    /// place, and must not both count it.
    pub fn key(&self) -> u64 {
        self.key
    }
}

impl Room {
    /// Opens a watch on the waiting visitor `uid` whose cookie values are `cookies`.
    pub fn watch(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        cookies: &[&[u8]],
        now: Timestamp,
    ) -> Result<Watch, Unwatched> {
        if !self.config.enabled {
            return Err(Unwatched::NotWaiting);
        }
        let phase = self.event_now(now);
        if phase.is_some_and(|p| p.state == EventState::PreQueue) {
            return Err(Unwatched::PreQueue);
        }
        let presented = Presented::check(ring, uid, cookies, self.binding(), now);
        let token = presented
            .valid
            .filter(|t| t.claims.dec == Dec::Wait)
            .ok_or(Unwatched::NotWaiting)?;
        let event = phase.map(|p| Arc::from(p.event.name.as_str()));
        let mut key = [0u8; 8];
        let sig = token.signature();
        key[..sig.len().min(8)].copy_from_slice(&sig[..sig.len().min(8)]);
        let key = u64::from_le_bytes(key);
        let cap = now.secs() + MAX_WATCH_SECS;
        let kind = match (&self.config.admission, self.policy_at(now).capacity()) {
            (AdmissionConfig::Lottery { .. }, _) if token.claims.arr.is_none() => Kind::Lottery {
                exp: token.claims.exp,
            },
            (_, Some(capacity)) => {
                let watched = capacity
                    .watch(uid, &token, now)
                    .ok_or(Unwatched::NotWaiting)?;
                let until = capacity.watch_until(&watched).min(cap);
                return Ok(Watch {
                    kind: Kind::Capacity(Box::new(watched)),
                    event,
                    until,
                    key,
                });
            }
            _ => return Err(Unwatched::NotWaiting),
        };
        Ok(Watch {
            kind,
            event,
            until: cap,
            key,
        })
    }

    /// What the stream tells the watched visitor at `now`. After [`Tell::Turn`] or
    /// [`Tell::End`], the watch is over: call [`Room::unwatch`].
    pub fn tell(&self, ring: &KeyRing, watch: &mut Watch, now: Timestamp) -> Tell {
        if !self.config.enabled || now.secs() >= watch.until {
            return Tell::End;
        }
        let phase = self.event_now(now);
        let running = phase.filter(|p| p.state == EventState::Running);
        if phase.is_some_and(|p| p.state == EventState::PreQueue)
            || running.map(|p| p.event.name.as_str()) != watch.event.as_deref()
        {
            return Tell::End;
        }
        let held = self.controls.held();
        let sold_out = self.sold_out_under(held);
        let grants = !sold_out && self.controls.grants_pending(&*self.store, self.name(), now);
        let hold = Hold {
            held: held.paused || sold_out,
            grant: &|| grants,
            event: running.map(|p| p.event),
            lane: None,
        };
        match &mut watch.kind {
            Kind::Lottery { exp } => {
                if now.secs() < *exp {
                    return Tell::Wait {
                        users_ahead: None,
                        estimates: Estimates::default(),
                    };
                }
                let open = !hold.held
                    && !self.config.queue_all
                    && self.policy_at(now).admit_chance(now) > 0.0;
                if open || grants {
                    Tell::Turn
                } else {
                    Tell::End
                }
            }
            Kind::Capacity(w) => match self.policy_at(now).capacity() {
                Some(capacity) => capacity.tell(ring, w, &hold, now),
                None => Tell::End,
            },
        }
    }

    /// Ends a watch: what the stream counted for the visitor goes back to where their cookie
    /// says they are, so their next request finds the queue as their own check-ins would
    /// have left it.
    pub fn unwatch(&self, watch: &Watch, now: Timestamp) {
        if let Kind::Capacity(w) = &watch.kind {
            if let Some(capacity) = self.policy_at(now).capacity() {
                capacity.unwatch(w, now);
            }
        }
    }
}
