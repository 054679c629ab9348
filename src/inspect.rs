//! `vestibule token inspect`: decode a cookie value, check it against the key ring, explain.

use std::fmt::Write as _;

use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::time::Timestamp;
use crate::token::{Dec, Reject, Token};

/// The report and whether the token is valid.
pub fn inspect(
    value: &str,
    ring: &KeyRing,
    uid: Option<&Identity>,
    now: Timestamp,
) -> (String, bool) {
    let value = value.trim();
    // Accept `name=value` as copied from a browser's cookie jar.
    let parsed = Token::parse(value.as_bytes()).or_else(|e| match value.split_once('=') {
        Some((name, rest)) if !name.contains('&') && rest.contains("dec=") => {
            Token::parse(rest.as_bytes())
        }
        _ => Err(e),
    });
    let mut out = String::new();
    let token = match parsed {
        Ok(t) => t,
        Err(_) => {
            out.push_str("verdict: invalid (malformed): not a vestibule token\n");
            return (out, false);
        }
    };
    let c = &token.claims;
    let when = |secs: u64| {
        let at = Timestamp::from_secs(secs);
        let rel = if secs >= now.secs() {
            format!(
                "in {}",
                humantime::format_duration(std::time::Duration::from_secs(secs - now.secs()))
            )
        } else {
            format!(
                "{} ago",
                humantime::format_duration(std::time::Duration::from_secs(now.secs() - secs))
            )
        };
        format!("{secs} ({}, {rel})", at.rfc3339())
    };
    let _ = writeln!(out, "dec      {}", c.dec.as_str());
    let _ = writeln!(out, "exp      {}", when(c.exp));
    let _ = writeln!(out, "uid      {}", c.uid);
    let key_note = match ring.get(&c.kid) {
        Some(k) if k.id() == ring.active().id() => "in the ring, active",
        Some(_) => "in the ring",
        None => "NOT in the ring",
    };
    let _ = writeln!(out, "kid      {} ({key_note})", c.kid);
    if let Some(v) = c.arr {
        let _ = writeln!(
            out,
            "arr      minute {v} ({})",
            Timestamp::from_secs(v * 60).rfc3339()
        );
    }
    if let Some(v) = c.acc {
        let _ = writeln!(out, "acc      {v} ms (admitted {})", when(v / 1000));
    }
    if let Some(v) = c.chk {
        let _ = writeln!(
            out,
            "chk      minute {v} ({})",
            Timestamp::from_secs(v * 60).rfc3339()
        );
    }
    if let Some(v) = c.refresh {
        let _ = writeln!(out, "ref      {v} s");
    }
    if let Some(v) = &c.room {
        let _ = writeln!(out, "rm       {v} (only this room takes it)");
    }
    if let Some(v) = &c.lane {
        let _ = writeln!(out, "ln       {v} (the priority lane it waits in)");
    }
    let sig = hex::encode(token.signature());
    let _ = writeln!(out, "sig      0x{}…", &sig[..16]);
    if c.dec == Dec::Wait && c.is_lottery() {
        let draw = token.draw(ring).unwrap_or(1.0) * 100.0;
        let _ = writeln!(
            out,
            "draw     {draw:.2} (wins in a lottery room whose allow_percentage is above this)"
        );
    }
    let verdict = match uid {
        Some(uid) => token.verify(ring, uid, now),
        None => token.verify_signature(ring).and_then(|()| {
            if c.dec == Dec::Allow && now.secs() >= c.exp {
                Err(Reject::Expired)
            } else {
                Ok(())
            }
        }),
    };
    match verdict {
        Ok(()) => {
            let _ = write!(out, "verdict: valid");
            if uid.is_none() {
                let _ = write!(
                    out,
                    " (signature and expiry; pass --uid to check whose it is)"
                );
            }
            out.push('\n');
            (out, true)
        }
        Err(reason) => {
            let why = match reason {
                Reject::Malformed => "not a vestibule token",
                Reject::UnknownKey => "its key id is not in the ring, so it is never trusted",
                Reject::BadSignature => "the signature does not match: the fields were changed, or the key's secret differs",
                Reject::WrongUser => "it belongs to another identity",
                Reject::Expired => "the allow token has expired",
                Reject::Revoked => "the origin ended this session",
                Reject::WrongRoom => "it was issued by another room",
            };
            let _ = writeln!(out, "verdict: invalid ({}): {why}", reason.as_str());
            (out, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Claims;

    use crate::keys::testing::KEY1 as KEY;

    #[test]
    fn reports_fields_and_verdicts() {
        let ring = KeyRing::from_entries("k1", &[("k1", KEY)]).unwrap();
        let uid = Identity::of_ip("192.0.2.1".parse().unwrap(), 64);
        let value = Claims::new(Dec::Wait, 1_000, &uid, "k1").sign(ring.active());
        let now = Timestamp::from_secs(900);
        let (report, ok) = inspect(&value, &ring, Some(&uid), now);
        assert!(ok, "{report}");
        assert!(report.contains("dec      wait"));
        assert!(report.contains("in the ring, active"));
        assert!(report.contains("draw"));
        let (_, ok) = inspect(&format!("waiting_room={value}"), &ring, None, now);
        assert!(ok);
        let other = Identity::of_ip("192.0.2.2".parse().unwrap(), 64);
        let (report, ok) = inspect(&value, &ring, Some(&other), now);
        assert!(!ok && report.contains("wrong_user"), "{report}");
        let (report, ok) = inspect(&value.replace("dec=wait", "dec=allow"), &ring, None, now);
        assert!(!ok && report.contains("bad_signature"), "{report}");
        let (report, ok) = inspect("nonsense", &ring, None, now);
        assert!(!ok && report.contains("malformed"));
    }
}
