//! A room's admission (lottery or capacity) and its `autopilot*` keys.

use super::*;

impl Validator<'_> {
    /// The `autopilot*` keys. They are checked whether or not `autopilot` is on, so a
    /// room can be switched on by one line; they steer only when it is.
    pub(super) fn autopilot(
        &mut self,
        i: usize,
        r: &RoomFile,
        admission: Option<&Admission>,
    ) -> Option<AutopilotConfig> {
        let k = |field: &str| format!("room[{i}].{field}");
        let target_latency = r
            .autopilot_target_latency
            .unwrap_or(Duration::from_millis(500));
        if target_latency < Duration::from_millis(1) || target_latency > Duration::from_secs(60) {
            self.err(k("autopilot_target_latency"), "must be between 1ms and 60s");
        }
        let max_error_rate = r.autopilot_max_error_rate.unwrap_or(0.02);
        if !(0.0..=1.0).contains(&max_error_rate) {
            self.err(
                k("autopilot_max_error_rate"),
                format!("must be a share between 0 and 1 (0.02 = 2 %), got {max_error_rate}"),
            );
        }
        let interval = r.autopilot_interval.unwrap_or(Duration::from_secs(10));
        if interval < Duration::from_secs(1)
            || interval > Duration::from_secs(300)
            || interval.subsec_nanos() != 0
        {
            self.err(
                k("autopilot_interval"),
                "must be a whole number of seconds between 1s and 5m",
            );
        }
        let lottery = matches!(admission, Some(Admission::Lottery { .. }));
        // Lottery rooms steer a percentage, which may go as low as 0 % (a crowd much larger
        // than the origin needs a tiny share); capacity rooms a pace of at least 1 a minute.
        let (lowest, highest) = if lottery { (0, 100) } else { (1, 10_000_000) };
        let mut bound = |field: &str, v: Option<i64>, default: i64| -> u32 {
            let v = v.unwrap_or(default);
            if !(lowest..=highest).contains(&v) {
                self.err(
                    k(field),
                    format!("must be between {lowest} and {highest}, got {v}"),
                );
                return default as u32;
            }
            v as u32
        };
        let min = bound("autopilot_min", r.autopilot_min, 1);
        let max = bound("autopilot_max", r.autopilot_max, 100);
        if min > max {
            self.err(
                k("autopilot_min"),
                format!("must not be over autopilot_max ({min} > {max})"),
            );
        }
        if !r.autopilot.unwrap_or(false) {
            return None;
        }
        let session = r.session_duration.unwrap_or(Duration::from_secs(300));
        if lottery
            && (session < Duration::from_secs(60) || session > Duration::from_secs(24 * 3600))
        {
            self.err(
                k("session_duration"),
                "must be between 1m and 24h (how long an admitted user counts as active)",
            );
        }
        match admission {
            Some(Admission::Lottery {
                allow_percentage: 0,
                ..
            }) => {
                self.err(
                    k("autopilot"),
                    "steers allow_percentage from where it is configured, and 0 closes the room: set the percentage to start from",
                );
                None
            }
            Some(Admission::Lottery { .. }) => Some(AutopilotConfig {
                target_latency,
                max_error_rate,
                min,
                max,
                interval,
                session,
            }),
            Some(Admission::Capacity(c)) if c.new_users_per_minute == 0 => {
                self.err(
                    k("autopilot"),
                    "steers new_users_per_minute: set it to the value to start from",
                );
                None
            }
            Some(Admission::Capacity(c)) => Some(AutopilotConfig {
                target_latency,
                max_error_rate,
                min,
                max,
                interval,
                session: c.session_duration,
            }),
            None => None,
        }
    }

    pub(super) fn admission(&mut self, i: usize, r: &RoomFile) -> Option<Admission> {
        let method = r.admission.as_deref().unwrap_or("lottery");
        match method {
            "lottery" => Some(self.lottery(i, r)),
            "random" | "fifo" => Some(self.capacity(i, r, method)),
            other => {
                self.err(
                    format!("room[{i}].admission"),
                    format!("must be \"lottery\", \"random\" or \"fifo\", got \"{other}\""),
                );
                None
            }
        }
    }

    /// A lottery room's keys. The capacity keys are errors in it, but for `session_duration`
    /// with the autopilot on.
    fn lottery(&mut self, i: usize, r: &RoomFile) -> Admission {
        let k = |field: &str| format!("room[{i}].{field}");
        let capacity_only = [
            ("new_users_per_minute", r.new_users_per_minute.is_some()),
            ("total_active_users", r.total_active_users.is_some()),
            ("session_duration", r.session_duration.is_some()),
            ("refresh", r.refresh.is_some()),
            ("rejoin_grace", r.rejoin_grace.is_some()),
            ("max_waiting_users", r.max_waiting_users.is_some()),
            ("lanes", r.lanes.is_some()),
        ];
        for (field, set) in capacity_only {
            // The autopilot of a lottery room counts admitted users for this long.
            let autopilot_key = field == "session_duration" && r.autopilot == Some(true);
            if set && !autopilot_key {
                self.err(k(field), "only applies when admission is \"random\" or \"fifo\" (this room uses \"lottery\")");
            }
        }
        let pct = r.allow_percentage.unwrap_or(50);
        if !(0..=100).contains(&pct) {
            self.err(
                k("allow_percentage"),
                format!("must be between 0 and 100, got {pct}"),
            );
        }
        let wait_period = r.wait_period.unwrap_or(Duration::from_secs(30));
        let allow_period = r.allow_period.unwrap_or(Duration::from_secs(3600));
        for (field, d) in [("wait_period", wait_period), ("allow_period", allow_period)] {
            if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
                self.err(k(field), "must be a whole number of seconds, at least 1s");
            }
        }
        let closed_refresh = r.closed_refresh.unwrap_or(Duration::from_secs(60));
        if closed_refresh < Duration::from_secs(5)
            || closed_refresh > Duration::from_secs(3600)
            || closed_refresh.subsec_nanos() != 0
        {
            self.err(
                k("closed_refresh"),
                "must be a whole number of seconds between 5s and 1h",
            );
        }
        Admission::Lottery {
            allow_percentage: pct.clamp(0, 100) as u8,
            wait_period,
            allow_period,
            closed_refresh,
        }
    }

    /// A capacity room's keys (`random` or `fifo`). The lottery keys are errors in it.
    fn capacity(&mut self, i: usize, r: &RoomFile, method: &str) -> Admission {
        let k = |field: &str| format!("room[{i}].{field}");
        let lottery_only = [
            ("allow_percentage", r.allow_percentage.is_some()),
            ("wait_period", r.wait_period.is_some()),
            ("allow_period", r.allow_period.is_some()),
            ("closed_refresh", r.closed_refresh.is_some()),
        ];
        for (field, set) in lottery_only {
            if set {
                self.err(
                    k(field),
                    format!(
                        "only applies when admission is \"lottery\" (this room uses \"{method}\")"
                    ),
                );
            }
        }
        let mut limit = |field: &str, v: Option<i64>| -> u32 {
            let v = v.unwrap_or(0);
            if !(0..=10_000_000).contains(&v) {
                self.err(
                    k(field),
                    format!("must be between 0 (no limit) and 10000000, got {v}"),
                );
                return 0;
            }
            v as u32
        };
        let new_users_per_minute = limit("new_users_per_minute", r.new_users_per_minute);
        let max_waiting_users = limit("max_waiting_users", r.max_waiting_users);
        let total_active_users = limit("total_active_users", r.total_active_users);
        if new_users_per_minute == 0 && total_active_users == 0 {
            self.err(
                k("admission"),
                format!("\"{method}\" needs a capacity: set new_users_per_minute, total_active_users or both"),
            );
        }
        let session_duration = r.session_duration.unwrap_or(Duration::from_secs(300));
        if session_duration < Duration::from_secs(60)
            || session_duration > Duration::from_secs(24 * 3600)
        {
            self.err(
                k("session_duration"),
                "must be between 1m and 24h (activity is counted per minute)",
            );
        }
        let refresh = r.refresh.unwrap_or(Duration::from_secs(20));
        if refresh < Duration::from_secs(5) || refresh > Duration::from_secs(300) {
            self.err(k("refresh"), "must be between 5s and 5m");
        }
        let rejoin_grace = r.rejoin_grace.unwrap_or(Duration::from_secs(300));
        if rejoin_grace < refresh.mul_f64(2.0) || rejoin_grace > Duration::from_secs(86_400) {
            self.err(
                k("rejoin_grace"),
                "must be between twice the refresh and 24h (a visitor checks in every refresh)",
            );
        }
        Admission::Capacity(CapacityConfig {
            order: if method == "fifo" {
                QueueOrder::Fifo
            } else {
                QueueOrder::Random
            },
            new_users_per_minute,
            total_active_users,
            session_duration,
            refresh,
            rejoin_grace,
            max_waiting_users,
            lanes: self.lanes(i, r),
        })
    }
}
