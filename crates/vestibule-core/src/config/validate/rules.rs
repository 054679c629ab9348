//! `[[rate_limit]]`: each rule's key, scope and algorithm (window, token bucket, concurrency).

use super::*;

const WINDOWS: [u64; 3] = [1, 10, 60];
const DEFAULT_MAX_KEYS: i64 = 16_384;
const MAX_MAX_KEYS: i64 = 50_000_000;

impl Validator<'_> {
    pub(super) fn rules(&mut self, rules: &[RateLimitFile]) -> Vec<RuleConfig> {
        let mut out = Vec::new();
        let mut names = HashSet::new();
        for (i, r) in rules.iter().enumerate() {
            let k = |field: &str| format!("rate_limit[{i}].{field}");
            let name = r.name.clone().unwrap_or_else(|| "per-ip".into());
            if !is_label(&name) || name.contains('"') {
                self.err(
                    k("name"),
                    format!(
                        "\"{name}\" may use only letters, digits, '_', '-' and '.' (at most 64)"
                    ),
                );
            }
            if !names.insert(name.clone()) {
                self.err(
                    k("name"),
                    format!("another rule is already named \"{name}\""),
                );
            }
            let mut key = Vec::new();
            let parts = r.key.clone().unwrap_or_else(|| vec!["client_ip".into()]);
            if parts.is_empty() {
                self.err(k("key"), "needs at least one part, e.g. [\"client_ip\"]");
            }
            for (j, part) in parts.iter().enumerate() {
                match parse_key_part(part) {
                    Ok(p) => key.push(p),
                    Err(msg) => self.err(format!("rate_limit[{i}].key[{j}]"), msg),
                }
            }
            let paths = self.prefixes(
                &k("paths"),
                &r.paths.clone().unwrap_or_else(|| vec!["/".into()]),
            );
            let mut methods = Vec::new();
            for (j, m) in r.methods.clone().unwrap_or_default().iter().enumerate() {
                match http::Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes()) {
                    Ok(m) => methods.push(m),
                    Err(_) => self.err(
                        format!("rate_limit[{i}].methods[{j}]"),
                        format!("\"{m}\" is not an HTTP method"),
                    ),
                }
            }
            let scope = match r.scope.as_deref().unwrap_or("all") {
                "all" => Scope::All,
                "origin" => Scope::Origin,
                other => {
                    self.err(
                        k("scope"),
                        format!("must be \"all\" or \"origin\", got \"{other}\""),
                    );
                    Scope::All
                }
            };
            let action = match r.action.as_deref().unwrap_or("block") {
                "block" => Action::Block,
                "log" => Action::Log,
                other => {
                    self.err(
                        k("action"),
                        format!("must be \"block\" or \"log\" (dry run), got \"{other}\""),
                    );
                    Action::Block
                }
            };
            let bypass_cidrs = self.cidrs(
                &k("bypass_cidrs"),
                &r.bypass_cidrs.clone().unwrap_or_default(),
            );
            let max_keys = r.max_keys.unwrap_or(DEFAULT_MAX_KEYS);
            if !(1..=MAX_MAX_KEYS).contains(&max_keys) {
                self.err(
                    k("max_keys"),
                    format!("must be between 1 and {MAX_MAX_KEYS}, got {max_keys}"),
                );
            }
            let Some(algorithm) = self.algorithm(i, r) else {
                continue;
            };
            let shared = r.shared.unwrap_or(false);
            if shared && !matches!(algorithm, Algorithm::Window { .. }) {
                self.err(
                    k("shared"),
                    "applies to window rules only: token buckets and concurrency caps count per node",
                );
            }
            out.push(RuleConfig {
                name,
                key,
                paths,
                methods,
                algorithm,
                scope,
                action,
                bypass_cidrs,
                max_keys: max_keys.clamp(1, MAX_MAX_KEYS) as usize,
                shared,
            });
        }
        out
    }

    fn algorithm(&mut self, i: usize, r: &RateLimitFile) -> Option<Algorithm> {
        let k = |field: &str| format!("rate_limit[{i}].{field}");
        let algorithm = r.algorithm.as_deref().unwrap_or("window");
        let not_for = |v: &mut Self, field: &str, set: bool, why: &str| {
            if set {
                v.err(
                    k(field),
                    format!("does not apply to a \"{algorithm}\" rule: {why}"),
                );
            }
        };
        // A rate ("5/10s") carries the duration its count is over, which then replaces the
        // `window` or `period` key instead of competing with it.
        let (limit, rate) = match &r.limit {
            None => (100, None),
            Some(LimitText::Count(n)) => (*n, None),
            Some(LimitText::Rate(text)) => match parse_rate(text) {
                Ok((n, per)) => (n, Some((text.as_str(), per))),
                Err(message) => {
                    self.err(k("limit"), message);
                    (100, None)
                }
            },
        };
        if !(1..=100_000_000).contains(&limit) {
            self.err(
                k("limit"),
                format!("must be between 1 and 100000000, got {limit}"),
            );
        }
        let limit = limit.clamp(1, 100_000_000) as u32;
        let penalty = r.penalty.unwrap_or(Duration::from_secs(15 * 60));
        if penalty > Duration::from_secs(7 * 24 * 3600) {
            self.err(k("penalty"), "must be at most 7 days");
        }
        match algorithm {
            "window" => {
                not_for(
                    self,
                    "period",
                    r.period.is_some(),
                    "windows are 1s, 10s or 60s, set with `window`",
                );
                let (window, quota) = self.window_quota(i, r, rate, limit);
                Some(Algorithm::Window {
                    window,
                    quota,
                    penalty,
                })
            }
            "token_bucket" => {
                not_for(
                    self,
                    "window",
                    r.window.is_some(),
                    "a bucket refills `limit` tokens per `period`",
                );
                let period = self.bucket_period(i, r, rate);
                Some(Algorithm::TokenBucket {
                    limit,
                    period,
                    penalty,
                })
            }
            "concurrency" => {
                not_for(
                    self,
                    "window",
                    r.window.is_some(),
                    "it caps requests in flight, with no time window",
                );
                not_for(
                    self,
                    "period",
                    r.period.is_some(),
                    "it caps requests in flight, with no time window",
                );
                not_for(
                    self,
                    "penalty",
                    r.penalty.is_some(),
                    "a slot frees as soon as a request ends",
                );
                if let Some((text, _)) = rate {
                    self.err(
                        k("limit"),
                        format!("\"{text}\" is a rate; a concurrency rule's limit is a number of requests in flight"),
                    );
                }
                Some(Algorithm::Concurrency { limit })
            }
            other => {
                self.err(
                    k("algorithm"),
                    format!(
                        "must be \"window\", \"token_bucket\" or \"concurrency\", got \"{other}\""
                    ),
                );
                None
            }
        }
    }

    /// A window rule's window and quota: from a rate given as `limit`, else from `window` (a
    /// number being requests per second).
    fn window_quota(
        &mut self,
        i: usize,
        r: &RateLimitFile,
        rate: Option<(&str, Duration)>,
        limit: u32,
    ) -> (Duration, u64) {
        let k = |field: &str| format!("rate_limit[{i}].{field}");
        match rate {
            Some((text, per)) => {
                self.implied(k("window"), r.window.is_some(), text);
                if per.subsec_nanos() != 0 || !WINDOWS.contains(&per.as_secs()) {
                    self.err(
                        k("limit"),
                        format!(
                            "\"{text}\": a window rule counts over 1s, 10s or 60s, got {}",
                            humantime::format_duration(per)
                        ),
                    );
                }
                (per, u64::from(limit))
            }
            None => {
                let window = r.window.unwrap_or(Duration::from_secs(10));
                if window.subsec_nanos() != 0 || !WINDOWS.contains(&window.as_secs()) {
                    self.err(
                        k("window"),
                        format!(
                            "must be \"1s\", \"10s\" or \"60s\", got {}",
                            humantime::format_duration(window)
                        ),
                    );
                }
                // A number is requests per second, averaged over the window.
                (window, u64::from(limit) * window.as_secs().max(1))
            }
        }
    }

    /// A token bucket's refill period: from a rate given as `limit`, else from `period`.
    fn bucket_period(
        &mut self,
        i: usize,
        r: &RateLimitFile,
        rate: Option<(&str, Duration)>,
    ) -> Duration {
        let k = |field: &str| format!("rate_limit[{i}].{field}");
        match rate {
            Some((text, per)) => {
                self.implied(k("period"), r.period.is_some(), text);
                if per < Duration::from_secs(1) || per > Duration::from_secs(24 * 3600) {
                    self.err(
                        k("limit"),
                        format!("\"{text}\": the period must be between 1s and 24h"),
                    );
                }
                per
            }
            None => {
                let period = r.period.unwrap_or(Duration::from_secs(10));
                if period < Duration::from_secs(1) || period > Duration::from_secs(24 * 3600) {
                    self.err(k("period"), "must be between 1s and 24h");
                }
                period
            }
        }
    }

    /// `key` set beside a rate (`limit = text`) that already gives it.
    fn implied(&mut self, key: String, set: bool, text: &str) {
        if set {
            self.err(
                key,
                format!("is already given by limit = \"{text}\": remove one of them"),
            );
        }
    }
}

/// `"N/DURATION"`: N requests per DURATION (`"5/10s"`, `"100/1m"`; `"5/s"` reads as `"5/1s"`).
fn parse_rate(text: &str) -> Result<(i64, Duration), String> {
    let bad = || format!("\"{text}\" is not a number of requests or a rate like \"5/10s\"");
    let (count, per) = text.split_once('/').ok_or_else(bad)?;
    let count: i64 = count.trim().parse().map_err(|_| bad())?;
    let per = per.trim();
    let per = if per.starts_with(|c: char| c.is_ascii_alphabetic()) {
        humantime::parse_duration(&format!("1{per}"))
    } else {
        humantime::parse_duration(per)
    }
    .map_err(|_| bad())?;
    if per.is_zero() {
        return Err(bad());
    }
    Ok((count, per))
}

fn parse_key_part(part: &str) -> Result<KeyPart, String> {
    match part {
        "client_ip" => Ok(KeyPart::ClientIp),
        "host" => Ok(KeyPart::Host),
        "path" => Ok(KeyPart::Path),
        "method" => Ok(KeyPart::Method),
        _ => {
            if let Some(h) = part.strip_prefix("header:") {
                http::HeaderName::from_bytes(h.trim().as_bytes())
                    .map(KeyPart::Header)
                    .map_err(|_| format!("\"{h}\" is not a valid header name"))
            } else if let Some(c) = part.strip_prefix("cookie:") {
                if is_cookie_name(c) {
                    Ok(KeyPart::Cookie(c.to_owned()))
                } else {
                    Err(format!("\"{c}\" is not a valid cookie name"))
                }
            } else {
                Err(format!(
                    "\"{part}\" is not a key part; use client_ip, host, path, method, header:<name> or cookie:<name>"
                ))
            }
        }
    }
}
