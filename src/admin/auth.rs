//! Who is asking the admin listener: an operator by bearer token, or by the console's session
//! cookie; the console's sessions, its CSRF tokens and the login throttle.
//!
//! Tokens are never kept: an operator is known by the SHA-256 of their token, and a presented
//! token is hashed once and compared with every operator's hash in constant time (all of them,
//! so the time says nothing about which one matched). Sessions are node-local and in memory: a
//! restart signs everyone out. A session lasts [`SESSION_TTL`] and ends at logout, or as soon as
//! its operator is removed or given another token by a reload.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{Operator, Role};
use crate::time::Timestamp;

/// The console's session cookie.
pub(crate) const COOKIE: &str = "vestibule_console";
/// How long a console session lasts.
pub(crate) const SESSION_TTL: u64 = 12 * 3600;
/// Failed logins from one address within a minute before every login from it is refused.
pub(crate) const MAX_FAILURES: u32 = 5;
/// Most console sessions kept at once; past it the oldest is ended.
const MAX_SESSIONS: usize = 10_000;
/// Most addresses whose failed logins are counted at once.
const MAX_FAILING: usize = 10_000;

/// An operator known to the admin listener, and how they came in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Who {
    pub name: String,
    pub role: Role,
    pub via: Via,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// `Authorization: Bearer`: an API client or `vestibule ctl`.
    Bearer,
    /// The console's session cookie, with the session's CSRF token.
    Session { csrf: String },
}

/// The operator whose token hashes to the digest of `token`, compared with every operator.
pub(crate) fn operator_of<'a>(operators: &'a [Operator], token: &[u8]) -> Option<&'a Operator> {
    let digest: [u8; 32] = Sha256::digest(token).into();
    let mut found = None;
    for o in operators {
        if bool::from(o.token_sha256.ct_eq(&digest)) {
            found = Some(o);
        }
    }
    found
}

/// What an `Authorization` header says: `None` without one, `Some(None)` for a token nobody
/// holds (or another scheme), `Some(Some(op))` for an operator.
pub(crate) fn bearer<'a>(
    operators: &'a [Operator],
    authorization: Option<&[u8]>,
) -> Option<Option<&'a Operator>> {
    let value = authorization?;
    Some(super::parse::bearer_token(value).and_then(|given| operator_of(operators, given)))
}

struct Session {
    operator: String,
    /// The operator's token hash when the session began: a new token ends it.
    token_sha256: [u8; 32],
    csrf: String,
    expires: Timestamp,
}

/// Why a login was refused. Every kind shows the same message: the login is no oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoginRefused {
    /// The token is nobody's.
    Invalid,
    /// Too many failures from this address this minute.
    Throttled,
}

/// The console's sessions and the login throttle.
#[derive(Default)]
pub(crate) struct Sessions {
    /// By the SHA-256 of the session id, so a lookup's timing says nothing about ids.
    open: Mutex<HashMap<[u8; 32], Session>>,
    /// Failed logins by address: the minute they were counted in, and how many.
    failing: Mutex<HashMap<IpAddr, (u64, u32)>>,
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn id_key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    /// Signs in with `token` from `addr`: the new session's id and the operator, or why not.
    /// After [`MAX_FAILURES`] failures from `addr` within a minute, every login from it (even a
    /// right one) is refused until that minute is over.
    pub fn login(
        &self,
        operators: &[Operator],
        addr: Option<IpAddr>,
        token: &[u8],
        now: Timestamp,
    ) -> Result<(String, Who), LoginRefused> {
        let minute = now.secs() / 60;
        if let Some(addr) = addr {
            let failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
            if failing
                .get(&addr)
                .is_some_and(|(m, n)| *m == minute && *n >= MAX_FAILURES)
            {
                return Err(LoginRefused::Throttled);
            }
        }
        let Some(op) = operator_of(operators, token).filter(|_| !token.is_empty()) else {
            if let Some(addr) = addr {
                let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
                if failing.len() >= MAX_FAILING && !failing.contains_key(&addr) {
                    failing.retain(|_, (m, _)| *m == minute);
                    if failing.len() >= MAX_FAILING {
                        // Every address failing this minute: count this one in place of an
                        // arbitrary other, which may then try again this minute.
                        if let Some(k) = failing.keys().next().copied() {
                            failing.remove(&k);
                        }
                    }
                }
                let entry = failing.entry(addr).or_insert((minute, 0));
                if entry.0 != minute {
                    *entry = (minute, 0);
                }
                entry.1 += 1;
            }
            return Err(LoginRefused::Invalid);
        };
        let id = random_hex(32);
        let csrf = random_hex(32);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= MAX_SESSIONS {
            open.retain(|_, s| s.expires > now);
            if open.len() >= MAX_SESSIONS {
                if let Some(oldest) = open.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k) {
                    open.remove(&oldest);
                }
            }
        }
        open.insert(
            id_key(&id),
            Session {
                operator: op.name.clone(),
                token_sha256: op.token_sha256,
                csrf: csrf.clone(),
                expires: Timestamp::from_secs(now.secs() + SESSION_TTL),
            },
        );
        Ok((
            id,
            Who {
                name: op.name.clone(),
                role: op.role,
                via: Via::Session { csrf },
            },
        ))
    }

    /// The operator of session `id`, while it lasts and its operator keeps their token.
    pub fn who(&self, operators: &[Operator], id: &str, now: Timestamp) -> Option<Who> {
        let key = id_key(id);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let s = open.get(&key)?;
        let op = operators
            .iter()
            .find(|o| o.name == s.operator && o.token_sha256 == s.token_sha256);
        match op {
            Some(op) if s.expires > now => Some(Who {
                name: op.name.clone(),
                role: op.role,
                via: Via::Session {
                    csrf: s.csrf.clone(),
                },
            }),
            _ => {
                open.remove(&key);
                None
            }
        }
    }

    /// Ends session `id`.
    pub fn logout(&self, id: &str) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.remove(&id_key(id));
    }

    /// How many sessions are open (for `/status`).
    pub fn open(&self, now: Timestamp) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.values().filter(|s| s.expires > now).count()
    }
}

/// Whether `given` is the session's CSRF token, compared in constant time.
pub(crate) fn csrf_ok(expected: &str, given: Option<&[u8]>) -> bool {
    given.is_some_and(|g| !g.is_empty() && bool::from(g.ct_eq(expected.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops() -> Vec<Operator> {
        vec![
            Operator {
                name: "alice".into(),
                token_sha256: Sha256::digest(b"alice-token-0123456789").into(),
                role: Role::Operator,
            },
            Operator {
                name: "vera".into(),
                token_sha256: Sha256::digest(b"vera-token-0123456789").into(),
                role: Role::Viewer,
            },
        ]
    }

    #[test]
    fn a_bearer_token_names_its_operator_and_nothing_else_does() {
        let ops = ops();
        let of = |h: &[u8]| bearer(&ops, Some(h)).map(|o| o.map(|o| o.name.clone()));
        assert_eq!(
            of(b"Bearer alice-token-0123456789"),
            Some(Some("alice".into()))
        );
        assert_eq!(
            of(b"bearer  vera-token-0123456789 "),
            Some(Some("vera".into()))
        );
        assert_eq!(of(b"Bearer alice-token-012345678"), Some(None));
        assert_eq!(of(b"Basic alice-token-0123456789"), Some(None));
        assert_eq!(of(b"Bearer "), Some(None));
        assert_eq!(of(b"Bearer"), Some(None));
        assert_eq!(bearer(&ops, None), None);
    }

    #[test]
    fn a_session_lasts_twelve_hours_and_ends_at_logout_or_a_new_token() {
        let s = Sessions::default();
        let mut ops = ops();
        let now = Timestamp::from_secs(1_000_000);
        let (id, who) = s.login(&ops, None, b"alice-token-0123456789", now).unwrap();
        assert_eq!(who.name, "alice");
        assert_eq!(s.who(&ops, &id, now).unwrap().via, who.via);
        let later = Timestamp::from_secs(now.secs() + SESSION_TTL - 1);
        assert!(s.who(&ops, &id, later).is_some());
        let expired = Timestamp::from_secs(now.secs() + SESSION_TTL);
        assert!(s.who(&ops, &id, expired).is_none());
        assert!(
            s.who(&ops, &id, now).is_none(),
            "an expired session is gone"
        );

        let (id, _) = s.login(&ops, None, b"alice-token-0123456789", now).unwrap();
        assert!(s.who(&ops, "forged", now).is_none());
        s.logout(&id);
        assert!(s.who(&ops, &id, now).is_none());

        let (id, _) = s.login(&ops, None, b"alice-token-0123456789", now).unwrap();
        ops[0].token_sha256 = Sha256::digest(b"another").into();
        assert!(s.who(&ops, &id, now).is_none(), "a rotated token ends it");
    }

    #[test]
    fn five_failures_a_minute_lock_out_even_the_right_token_until_the_minute_ends() {
        let s = Sessions::default();
        let ops = ops();
        let addr: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let now = Timestamp::from_secs(600);
        for _ in 0..MAX_FAILURES {
            assert_eq!(
                s.login(&ops, Some(addr), b"wrong", now).unwrap_err(),
                LoginRefused::Invalid
            );
        }
        assert_eq!(
            s.login(&ops, Some(addr), b"alice-token-0123456789", now)
                .unwrap_err(),
            LoginRefused::Throttled
        );
        assert!(s
            .login(&ops, Some(other), b"alice-token-0123456789", now)
            .is_ok());
        let next_minute = Timestamp::from_secs(660);
        assert!(s
            .login(&ops, Some(addr), b"alice-token-0123456789", next_minute)
            .is_ok());
        assert_eq!(
            s.login(&ops, Some(addr), b"", next_minute).unwrap_err(),
            LoginRefused::Invalid
        );
    }

    #[test]
    fn csrf_tokens_must_match_exactly() {
        assert!(csrf_ok("abc", Some(b"abc")));
        assert!(!csrf_ok("abc", Some(b"abd")));
        assert!(!csrf_ok("abc", Some(b"")));
        assert!(!csrf_ok("abc", None));
    }
}
