//! `[[room]]`: each waiting room's scope, cookie, pages, lanes, access and challenge.

use super::*;

impl Validator<'_> {
    pub(super) fn rooms(&mut self, rooms: &[RoomFile]) -> Vec<RoomConfig> {
        let mut out: Vec<RoomConfig> = Vec::new();
        let mut names = HashSet::new();
        let mut cookies = HashSet::new();
        let mut default_cookie_taken = false;
        for (i, r) in rooms.iter().enumerate() {
            let k = |field: &str| format!("room[{i}].{field}");
            let name = self.room_name(i, r, &mut names);
            let cookie_name =
                self.cookie_name(i, r, &name, &mut cookies, &mut default_cookie_taken);
            let (hosts, paths, bypass_paths, bypass_cidrs) = self.scope(i, r);
            let admission = self.admission(i, r);
            let cookie = self.cookie(i, r, cookie_name);
            let wait_status = r.wait_status.unwrap_or(200);
            if !((200..300).contains(&wait_status) || wait_status == 429 || wait_status == 503) {
                self.err(
                    k("wait_status"),
                    format!("must be a 2xx status, 429 or 503, got {wait_status}"),
                );
            }
            let pages = self.pages(r);
            let (title, default_language) = self.texts(i, r, &name);
            let mode = self.mode(i, r);
            let capacity = matches!(admission, Some(Admission::Capacity(_)));
            let (events, problems) =
                super::event::check_events(&r.event, capacity, &|p| self.resolve(p));
            for (key, message) in problems {
                self.err(k(&key), message);
            }
            let autopilot = self.autopilot(i, r, admission.as_ref());
            let challenge = self.challenge(i, r);
            let (access, max_invitations) = self.access(i, r);
            let revoked_invitations = self.revoked_invitations(i, r);
            let Some(admission) = admission else { continue };
            let jwt = self.room_jwt(i, r, &name);
            let api = self.room_api(i, r, &admission, &events);
            let enqueue = self.room_enqueue(i, r);
            out.push(RoomConfig {
                name,
                enabled: r.enabled.unwrap_or(true),
                hosts,
                paths,
                bypass_paths,
                bypass_cidrs,
                admission,
                cookie,
                wait_status,
                pages,
                queue_all: r.queue_all.unwrap_or(false),
                title,
                sold_out: r.sold_out.unwrap_or(false),
                default_language,
                mode,
                events,
                autopilot,
                challenge,
                access,
                max_invitations,
                revoked_invitations,
                jwt,
                api,
                enqueue,
            });
        }
        out
    }

    /// `api` and `queue_position_expiry`: queue numbers need one order to be served in.
    fn room_api(
        &mut self,
        i: usize,
        r: &RoomFile,
        admission: &Admission,
        events: &[EventConfig],
    ) -> Option<RoomApi> {
        let k = |field: &str| format!("room[{i}].{field}");
        if !r.api.unwrap_or(false) {
            if r.queue_position_expiry.is_some() {
                self.err(k("queue_position_expiry"), "only applies with api = true");
            }
            return None;
        }
        match admission {
            Admission::Capacity(c) if c.order == QueueOrder::Fifo => {
                if !c.lanes.is_empty() {
                    self.err(
                        k("api"),
                        "cannot be used with lanes: queue numbers are served in one order",
                    );
                }
            }
            _ => self.err(
                k("api"),
                "applies only to capacity rooms with order = \"fifo\" (queue numbers are served \
                 in the order they were given)",
            ),
        }
        // A request id is a bearer place: it would hand on entry to an invite or pow room.
        for (on, what) in [
            (r.access.as_deref() == Some("invite"), "access = \"invite\""),
            (r.challenge.as_deref() == Some("pow"), "challenge = \"pow\""),
        ] {
            if on {
                self.err(
                    k("api"),
                    format!(
                        "cannot be used with {what}: a request id is a bearer place, so its holder \
                         could hand entry to anyone"
                    ),
                );
            }
        }
        if events.iter().any(|e| e.shuffle_at_start) {
            self.err(
                k("api"),
                "cannot be used with an event's shuffle_at_start: queue numbers are the order of \
                 arrival",
            );
        }
        let expiry = r.queue_position_expiry.unwrap_or_default();
        if !expiry.is_zero()
            && (expiry < Duration::from_secs(10) || expiry > Duration::from_secs(86_400))
        {
            self.err(
                k("queue_position_expiry"),
                "must be 0s (never) or between 10s and 1d",
            );
        }
        Some(RoomApi {
            position_expiry: expiry,
        })
    }

    /// `jwt`, `jwt_audience` and `jwt_validity`.
    fn room_jwt(&mut self, i: usize, r: &RoomFile, name: &str) -> Option<RoomJwt> {
        let k = |field: &str| format!("room[{i}].{field}");
        if !r.jwt.unwrap_or(false) {
            for (set, field) in [
                (r.jwt_audience.is_some(), "jwt_audience"),
                (r.jwt_validity.is_some(), "jwt_validity"),
            ] {
                if set {
                    self.err(k(field), "only applies with jwt = true");
                }
            }
            return None;
        }
        // A JWT is a bearer pass anyone holding it may use: in a room that admits only those
        // who hold an invitation, or who did the work, it would let them hand entry on.
        for (on, what) in [
            (r.access.as_deref() == Some("invite"), "access = \"invite\""),
            (r.challenge.as_deref() == Some("pow"), "challenge = \"pow\""),
        ] {
            if on {
                self.err(
                    k("jwt"),
                    format!(
                        "cannot be used with {what}: a JWT is a bearer pass, so its holder could hand \
                         entry to anyone"
                    ),
                );
            }
        }
        let audience = r.jwt_audience.clone().unwrap_or_else(|| name.to_owned());
        if audience.is_empty() || audience.len() > 256 || audience.chars().any(char::is_control) {
            self.err(
                k("jwt_audience"),
                "must be 1 to 256 characters, without control characters",
            );
        }
        let validity = r.jwt_validity.unwrap_or(Duration::from_secs(3600));
        if validity < Duration::from_secs(60) || validity > Duration::from_secs(7 * 86_400) {
            self.err(k("jwt_validity"), "must be between 1m and 7d");
        }
        Some(RoomJwt { audience, validity })
    }

    /// `enqueue` and `enqueue_key`. `enqueue_key` without `enqueue` on is an error, as is
    /// `enqueue` on without a key: a room could verify nothing.
    fn room_enqueue(&mut self, i: usize, r: &RoomFile) -> Option<RoomEnqueue> {
        use crate::enqueue::{EnqueueKey, Mode};
        let k = |field: &str| format!("room[{i}].{field}");
        let value = r.enqueue.as_deref().unwrap_or("off");
        let Some(mode) = Mode::parse(value) else {
            self.err(
                k("enqueue"),
                format!("must be \"off\", \"optional\" or \"required\", got \"{value}\""),
            );
            return None;
        };
        let file = r
            .enqueue_key
            .as_deref()
            .map(str::trim)
            .filter(|f| !f.is_empty());
        let file = match (mode, file) {
            (Mode::Off, None) => return None,
            (Mode::Off, Some(_)) => {
                self.err(
                    k("enqueue_key"),
                    "only applies with enqueue = \"optional\" or \"required\"",
                );
                return None;
            }
            (_, None) => {
                self.err(
                    k("enqueue"),
                    format!(
                        "\"{value}\" needs enqueue_key: the site's HS256 secret file or public key PEM"
                    ),
                );
                return None;
            }
            (_, Some(file)) => self.resolve(file),
        };
        let bytes = match self.host.read_bytes(&file) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.err(
                    k("enqueue_key"),
                    format!("cannot read {}: {e}", file.display()),
                );
                return None;
            }
        };
        match EnqueueKey::from_bytes(&bytes) {
            Ok(key) => Some(RoomEnqueue {
                mode,
                key,
                key_file: file,
            }),
            Err(e) => {
                self.err(k("enqueue_key"), format!("{}: {e}", file.display()));
                None
            }
        }
    }

    /// The room's `name`, which must be a label and the only room of that name.
    fn room_name(&mut self, i: usize, r: &RoomFile, names: &mut HashSet<String>) -> String {
        let k = |field: &str| format!("room[{i}].{field}");
        let name = r.name.clone().unwrap_or_else(|| "default".into());
        if !is_label(&name) {
            self.err(
                k("name"),
                format!("\"{name}\" may use only letters, digits, '_', '-' and '.' (at most 64)"),
            );
        }
        if !names.insert(name.clone()) {
            self.err(
                k("name"),
                format!("another room is already named \"{name}\""),
            );
        }
        name
    }

    /// The room's cookie name, unique among the rooms.
    fn cookie_name(
        &mut self,
        i: usize,
        r: &RoomFile,
        name: &str,
        cookies: &mut HashSet<String>,
        default_cookie_taken: &mut bool,
    ) -> String {
        let k = |field: &str| format!("room[{i}].{field}");
        // A room that names no cookie gets one of its own, so several rooms need no cookie
        // names to be written. The first such room keeps `waiting_room`, the name every room
        // had before, so visitors holding that cookie keep their place.
        let (cookie_name, written) = match &r.cookie_name {
            Some(c) => (c.clone(), true),
            None if *default_cookie_taken => (format!("waiting_room_{name}"), false),
            None => {
                *default_cookie_taken = true;
                ("waiting_room".to_owned(), false)
            }
        };
        if written && !is_cookie_name(&cookie_name) {
            self.err(
                k("cookie_name"),
                format!("\"{cookie_name}\" is not a valid cookie name"),
            );
        } else if !cookies.insert(cookie_name.clone()) {
            let whose = if written {
                ""
            } else {
                "this room's default cookie name "
            };
            self.err(
                k("cookie_name"),
                format!(
                    "{whose}\"{cookie_name}\" is used by another room; each room needs its own cookie"
                ),
            );
        }
        // The cookies the room sets beside its own (a proof-of-work solution, a JWT) are its
        // too: no other room's may share their names.
        let derived = [
            (r.challenge.as_deref() == Some("pow"), "_pow"),
            (r.jwt.unwrap_or(false), "_jwt"),
        ];
        for suffix in derived.iter().filter(|d| d.0).map(|d| d.1) {
            let own = format!("{cookie_name}{suffix}");
            if !cookies.insert(own.clone()) {
                self.err(
                    k("cookie_name"),
                    format!(
                        "this room's cookie \"{own}\" is another room's cookie name; each room needs its own cookies"
                    ),
                );
            }
        }
        cookie_name
    }

    /// What the room guards: `hosts`, `paths`, and what it lets by (`bypass_paths`,
    /// `bypass_cidrs`).
    fn scope(
        &mut self,
        i: usize,
        r: &RoomFile,
    ) -> (Vec<HostPattern>, Vec<String>, Vec<String>, Vec<IpNet>) {
        let k = |field: &str| format!("room[{i}].{field}");
        let hosts = r
            .hosts
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|h| {
                let h = h.trim().to_ascii_lowercase();
                match h.strip_prefix("*.") {
                    Some(rest) => HostPattern::Suffix(format!(".{rest}")),
                    None => HostPattern::Exact(h),
                }
            })
            .collect();
        let paths = self.prefixes(
            &k("paths"),
            &r.paths.clone().unwrap_or_else(|| vec!["/".into()]),
        );
        if paths.is_empty() {
            self.err(
                k("paths"),
                "needs at least one path prefix (\"/\" guards everything)",
            );
        }
        let bypass_paths = self.prefixes(
            &k("bypass_paths"),
            &r.bypass_paths.clone().unwrap_or_default(),
        );
        let bypass_cidrs = self.cidrs(
            &k("bypass_cidrs"),
            &r.bypass_cidrs.clone().unwrap_or_default(),
        );
        (hosts, paths, bypass_paths, bypass_cidrs)
    }

    /// The cookie's attributes: `SameSite`, `Secure` and its lifetime.
    fn cookie(&mut self, i: usize, r: &RoomFile, name: String) -> CookieConfig {
        let k = |field: &str| format!("room[{i}].{field}");
        let same_site = match r.cookie_same_site.as_deref().unwrap_or("lax") {
            "lax" => SameSite::Lax,
            "strict" => SameSite::Strict,
            "none" => SameSite::None,
            other => {
                self.err(
                    k("cookie_same_site"),
                    format!("must be \"lax\", \"strict\" or \"none\", got \"{other}\""),
                );
                SameSite::Lax
            }
        };
        let mut secure = match r.cookie_secure.as_deref().unwrap_or("auto") {
            "auto" => CookieSecure::Auto,
            "always" => CookieSecure::Always,
            "never" => CookieSecure::Never,
            other => {
                self.err(
                    k("cookie_secure"),
                    format!("must be \"auto\", \"always\" or \"never\", got \"{other}\""),
                );
                CookieSecure::Auto
            }
        };
        if same_site == SameSite::None {
            if secure == CookieSecure::Never {
                self.err(k("cookie_secure"), "cannot be \"never\" with cookie_same_site = \"none\": browsers drop such cookies");
            }
            secure = CookieSecure::Always;
        }
        let lifetime = r.cookie_lifetime.unwrap_or(Duration::from_secs(7200));
        if lifetime < Duration::from_secs(1) {
            self.err(k("cookie_lifetime"), "must be at least 1s");
        }
        CookieConfig {
            name,
            lifetime,
            same_site,
            secure,
        }
    }

    /// The folder of the room's pages, if it has one.
    fn pages(&mut self, r: &RoomFile) -> Option<PathBuf> {
        // A folder the room names is its own pages'; one that is missing serves the built-in
        // pages, with a warning (the snapshot says which). A room that names none takes `pages`
        // beside the config if there is one, else the built-in pages, so a first config needs
        // no copied files.
        let pages = match r.pages.as_deref() {
            Some(p) => Some(self.resolve(p)),
            None => Some(self.resolve("pages")).filter(|dir| self.host.is_dir(dir)),
        };
        pages
    }

    /// The room's `title` (its name when it has none) and `default_language`.
    fn texts(&mut self, i: usize, r: &RoomFile, name: &str) -> (String, String) {
        let k = |field: &str| format!("room[{i}].{field}");
        let title = r
            .title
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .unwrap_or(name)
            .to_owned();
        if title.chars().count() > 200 || title.chars().any(char::is_control) {
            self.err(
                k("title"),
                "must be at most 200 characters, without control characters",
            );
        }
        let default_language = r.default_language.clone().unwrap_or_else(|| "en".into());
        if default_language
            .parse::<unic_langid::LanguageIdentifier>()
            .is_err()
        {
            self.err(
                k("default_language"),
                format!("\"{default_language}\" is not a language tag (en, de, pt-BR, …)"),
            );
        }
        (title, default_language)
    }

    /// `mode`: enforce, or shadow (decide and count as usual, but forward every request).
    fn mode(&mut self, i: usize, r: &RoomFile) -> RoomMode {
        let k = |field: &str| format!("room[{i}].{field}");
        let mode = match r.mode.as_deref().unwrap_or("enforce") {
            "enforce" => RoomMode::Enforce,
            "shadow" => RoomMode::Shadow,
            other => {
                self.err(
                    k("mode"),
                    format!("must be \"enforce\" or \"shadow\", got \"{other}\""),
                );
                RoomMode::Enforce
            }
        };
        mode
    }

    /// `revoked_invitations`: each an invitation's id (its third field, 16 hex digits) or a
    /// whole code.
    fn revoked_invitations(&mut self, i: usize, r: &RoomFile) -> std::collections::BTreeSet<u64> {
        let mut out = std::collections::BTreeSet::new();
        for (j, entry) in r.revoked_invitations.iter().flatten().enumerate() {
            match crate::invite::id_of(entry) {
                Some(id) => {
                    out.insert(id);
                }
                None => self.err(
                    format!("room[{i}].revoked_invitations[{j}]"),
                    format!(
                        "\"{}\" is neither an invitation's id (16 hex digits) nor a code",
                        entry.chars().take(40).collect::<String>()
                    ),
                ),
            }
        }
        out
    }

    /// `lanes`: names as invitations write them, weights 1 to [`MAX_LANE_WEIGHT`],
    /// and `public` among them, the lane of everyone without an invitation's lane.
    pub(super) fn lanes(&mut self, i: usize, r: &RoomFile) -> Vec<Lane> {
        let k = |field: &str| format!("room[{i}].lanes{field}");
        let Some(lanes) = r.lanes.as_ref().filter(|l| !l.is_empty()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, weight) in lanes {
            if !crate::invite::is_valid_lane(name) {
                self.err(
                    k(&format!(".{name}")),
                    "a lane's name is 1-32 of a-z, 0-9, '_' and '-' (as `vestibule invite --lane` takes it)",
                );
                continue;
            }
            if !(1..=i64::from(MAX_LANE_WEIGHT)).contains(weight) {
                self.err(
                    k(&format!(".{name}")),
                    format!(
                        "a lane's weight must be between 1 and {MAX_LANE_WEIGHT}, got {weight}"
                    ),
                );
                continue;
            }
            out.push(Lane {
                name: std::sync::Arc::from(name.as_str()),
                weight: *weight as u32,
            });
        }
        if lanes.len() > MAX_LANES {
            self.err(
                k(""),
                format!("at most {MAX_LANES} lanes, got {}", lanes.len()),
            );
        }
        if !lanes.contains_key(crate::invite::PUBLIC_LANE) {
            self.err(
                k(""),
                "needs a \"public\" lane: visitors without an invitation's lane wait in it",
            );
        }
        out.sort_by_key(|l| (&*l.name != crate::invite::PUBLIC_LANE, l.name.clone()));
        out
    }

    /// `access` and `max_invitations`.
    fn access(&mut self, i: usize, r: &RoomFile) -> (Access, usize) {
        let k = |field: &str| format!("room[{i}].{field}");
        let access = match r.access.as_deref().unwrap_or("open") {
            "open" => Access::Open,
            "invite" => Access::Invite,
            other => {
                self.err(
                    k("access"),
                    format!("must be \"open\" or \"invite\", got \"{other}\""),
                );
                Access::Open
            }
        };
        let max = r.max_invitations.unwrap_or(DEFAULT_MAX_INVITATIONS as i64);
        if !(1..=10_000_000).contains(&max) {
            self.err(
                k("max_invitations"),
                format!("must be between 1 and 10000000 (invitations in use remembered at once), got {max}"),
            );
        }
        (access, max.clamp(1, 10_000_000) as usize)
    }

    /// The `challenge*` keys, checked whether or not `challenge` is on.
    fn challenge(&mut self, i: usize, r: &RoomFile) -> Option<ChallengeConfig> {
        use crate::challenge::{MAX_DIFFICULTY, MIN_DIFFICULTY};
        let k = |field: &str| format!("room[{i}].{field}");
        let difficulty = r.challenge_difficulty.unwrap_or(16);
        if !(i64::from(MIN_DIFFICULTY)..=i64::from(MAX_DIFFICULTY)).contains(&difficulty) {
            self.err(
                k("challenge_difficulty"),
                format!(
                    "must be between {MIN_DIFFICULTY} and {MAX_DIFFICULTY} (leading zero bits; each one doubles the work), got {difficulty}"
                ),
            );
        }
        let ttl = r.challenge_ttl.unwrap_or(Duration::from_secs(300));
        if ttl < Duration::from_secs(10)
            || ttl > Duration::from_secs(3600)
            || ttl.subsec_nanos() != 0
        {
            self.err(
                k("challenge_ttl"),
                "must be a whole number of seconds between 10s and 1h",
            );
        }
        let on_failure = match r.on_challenge_failure.as_deref().unwrap_or("retry") {
            "retry" => OnChallengeFailure::Retry,
            "infinite_queue" => OnChallengeFailure::InfiniteQueue,
            other => {
                self.err(
                    k("on_challenge_failure"),
                    format!("must be \"retry\" or \"infinite_queue\", got \"{other}\""),
                );
                OnChallengeFailure::Retry
            }
        };
        match r.challenge.as_deref().unwrap_or("none") {
            "none" => None,
            "pow" => Some(ChallengeConfig {
                difficulty: difficulty.clamp(i64::from(MIN_DIFFICULTY), i64::from(MAX_DIFFICULTY))
                    as u8,
                ttl,
                on_failure,
            }),
            other => {
                self.err(
                    k("challenge"),
                    format!("must be \"none\" or \"pow\", got \"{other}\""),
                );
                None
            }
        }
    }
}
