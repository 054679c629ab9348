//! Every metric family, in one place, registered in one registry.
//!
//! Names and labels are part of the external contract. Label values come from config
//! (room and rule names, validated as labels) or from fixed sets, never from requests, so the
//! number of series is bounded.

pub mod sharded;

use std::sync::Arc;

use prometheus::core::Metric;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use sharded::Counter;

use crate::history::{OriginTotals, RoomTotals};
use crate::ratelimit::Outcome;
use crate::room::event::EventState;
use crate::room::Decision;
use crate::snapshot::Snapshot;
use crate::store::CounterStore;
use crate::token::Reject;

/// Counter handles of one snapshot's rooms and rules, resolved once so requests do not hash
/// label values.
pub(crate) struct Handles {
    generation: u64,
    /// By room position: decisions (by `Decision::ALL`), admitted, rejections (by `Reject::ALL`).
    pub rooms: Vec<RoomHandles>,
    /// By rule position: outcomes (by `Outcome::ALL`).
    pub rules: Vec<[Arc<Counter>; 4]>,
}

pub(crate) struct RoomHandles {
    pub decisions: [Arc<Counter>; Decision::ALL.len()],
    pub admitted: Arc<Counter>,
    pub rejected: [Arc<Counter>; Reject::ALL.len()],
    /// `pow` rooms: challenges by result (issued, solved, failed).
    pub challenges: Option<[Arc<Counter>; 3]>,
    /// Invitations presented by visitors who needed one: accepted, refused.
    pub invitations: [Arc<Counter>; 2],
    /// Visitors new to the room.
    pub arrivals: Arc<Counter>,
    /// Time to admission of visitors admitted from the line.
    pub wait: Histogram,
    /// The room's answers, by [`ANSWER_KINDS`].
    pub answers: [Arc<Counter>; 4],
}

/// The `kind` labels of `vestibule_room_answers_total`, in [`RoomHandles::answers`] order:
/// held visitors answered with an HTML page or JSON, API requests, requests refused by a
/// rate-limit rule.
pub(crate) const ANSWER_KINDS: [&str; 4] = ["page", "json", "api", "ratelimited"];

/// Where a room's answer is counted in [`RoomHandles::answers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnswerKind {
    Page = 0,
    Json = 1,
    Api = 2,
    RateLimited = 3,
}

/// The `result` labels of `vestibule_room_invitations_total`, in
/// [`RoomHandles::invitations`] order.
pub(crate) const INVITATION_RESULTS: [&str; 2] = ["accepted", "refused"];

/// The `result` labels of `vestibule_room_challenges_total`, in [`RoomHandles::challenges`]
/// order.
pub(crate) const CHALLENGE_RESULTS: [&str; 3] = ["issued", "solved", "failed"];

/// Why the edge closed a connection (the `reason` label of
/// `vestibule_downstream_closed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Idle longer than `keepalive_timeout` between requests.
    KeepaliveTimeout,
    /// A request head (or a new connection's first byte) took longer than `header_timeout`.
    HeaderTimeout,
    /// A request head larger than the edge accepts (`listen::MAX_HEAD`).
    HeaderTooLarge,
    /// An HTTP/2 connection told to go away because its client reset too many of its streams
    /// early, or was refused for having done so (`crate::resets`).
    H2ResetFlood,
}

impl Closed {
    pub const ALL: [Closed; 4] = [
        Closed::KeepaliveTimeout,
        Closed::HeaderTimeout,
        Closed::HeaderTooLarge,
        Closed::H2ResetFlood,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Closed::KeepaliveTimeout => "keepalive_timeout",
            Closed::HeaderTimeout => "header_timeout",
            Closed::HeaderTooLarge => "header_too_large",
            Closed::H2ResetFlood => "h2_reset_flood",
        }
    }
}

/// The registry and handles to every family. The families every request counts in are
/// [`sharded`], so worker threads do not contend for their cache lines.
pub struct Metrics {
    handles: arc_swap::ArcSwapOption<Handles>,
    registry: Registry,
    upstream_responses: sharded::CounterVec,
    /// `upstream_responses` by class (1xx..5xx), resolved once.
    by_class: [Arc<Counter>; 5],
    upstream_response_seconds: sharded::Histogram,
    pub config_reloads: IntCounterVec,
    pub config_generation: IntGauge,
    pub upstream_unavailable: IntCounter,
    room_decisions: sharded::CounterVec,
    room_admitted: sharded::CounterVec,
    room_challenges: sharded::CounterVec,
    room_invitations: sharded::CounterVec,
    room_arrivals: sharded::CounterVec,
    room_answers: sharded::CounterVec,
    /// Time to admission, by room (admissions are at most a room's pace: no sharding needed).
    room_wait_seconds: HistogramVec,
    /// Minutes of history that could not be written.
    pub history_errors: IntCounter,
    pub room_allow_percentage: GaugeVec,
    token_rejected: sharded::CounterVec,
    pub room_active_users: IntGaugeVec,
    pub room_queue_number: IntGaugeVec,
    pub room_serving_number: IntGaugeVec,
    pub room_waiting_users: IntGaugeVec,
    pub room_wait_estimate: GaugeVec,
    ratelimit_decisions: sharded::CounterVec,
    pub ratelimit_penalty_box: IntGaugeVec,
    pub ratelimit_penalty_box_capacity: IntGaugeVec,
    /// Client connections the edge closed, by `Closed::ALL`.
    pub downstream_closed: [IntCounter; 4],
    downstream_closed_vec: IntCounterVec,
    pub store_up: IntGauge,
    pub store_sync_seconds: Histogram,
    pub store_errors: IntCounter,
    /// Bytes exchanged with the shared store, by direction (`sent`, `received`).
    pub store_bytes: IntCounterVec,
    pub cluster_nodes: IntGauge,
    pub room_slot_share: GaugeVec,
    pub proxy_protocol_rejected: IntCounter,
    /// TLS handshakes: `[ok, failed]`.
    pub tls_handshakes: [IntCounter; 2],
    tls_handshakes_vec: IntCounterVec,
    /// Requests by protocol and transport: index `h2 * 2 + tls`.
    pub downstream_requests: [Arc<Counter>; 4],
    downstream_requests_vec: sharded::CounterVec,
    pub tls_certificate_expiry: GaugeVec,
    /// Operator actions, by room, action and operator.
    pub admin_actions: IntCounterVec,
    /// Admin requests refused, by reason.
    pub admin_refused: IntCounterVec,
    /// Operator actions that could not be written to the audit log.
    pub audit_errors: IntCounter,
    /// Operator overrides in force, by room and override (`paused`, `sold_out`, `message`).
    pub room_override: IntGaugeVec,
    /// Admissions granted by `admit` and not taken yet, by room.
    pub room_admit_grants: IntGaugeVec,
    /// Scheduled events: 1 for each event's current state, 0 for the others.
    pub room_event_state: IntGaugeVec,
    /// Capacity rooms: the `new_users_per_minute` in force (the autopilot's while it runs).
    pub room_new_users_per_minute: IntGaugeVec,
    /// Autopilot rooms: the p95 of the room's origin answers in the last interval, and the
    /// target.
    pub room_autopilot_p95: GaugeVec,
    pub room_autopilot_target: GaugeVec,
    /// API requests, by room (empty for the JWKS), endpoint and status class.
    pub api_requests: IntCounterVec,
    /// JWTs signed, by room.
    pub jwt_issued: IntCounterVec,
    /// JWTs refused, by room and reason (`vestibule_core::jwt::Refusal`).
    pub jwt_rejected: IntCounterVec,
    /// Enqueue tokens accepted, by room.
    pub enqueue_accepted: IntCounterVec,
    /// Enqueue tokens refused (or missing where required), by room and reason
    /// (`vestibule_core::enqueue::Refusal`).
    pub enqueue_rejected: IntCounterVec,
    /// Events out, by sink, type and result (`delivered`, `retried` per attempt, `rejected`,
    /// `dropped`).
    pub events: IntCounterVec,
    /// Events in a sink's spool, waiting for delivery.
    pub events_spooled: IntGaugeVec,
    pub streams_open: IntGaugeVec,
    /// The age of a sink's oldest event waiting for delivery (0 when none waits).
    pub events_oldest_spooled: GaugeVec,
}

/// The upper bounds of `vestibule_upstream_response_seconds`, seconds.
const UPSTREAM_BOUNDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| unreachable!("{e}"))
}

fn int_gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| unreachable!("{e}"))
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    GaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| unreachable!("{e}"))
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let upstream_responses = sharded::CounterVec::new(
            "vestibule_upstream_responses_total",
            "Responses received from the origin, by status class.",
            &["status_class"],
        );
        let by_class =
            ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|c| upstream_responses.with_label_values(&[c]));
        let downstream_closed_vec = counter_vec(
            "vestibule_downstream_closed_total",
            "Client connections closed by the proxy for waiting too long, sending too much, or cancelling too many HTTP/2 requests.",
            &["reason"],
        );
        let downstream_closed =
            Closed::ALL.map(|c| downstream_closed_vec.with_label_values(&[c.as_str()]));
        let tls_handshakes_vec = counter_vec(
            "vestibule_tls_handshakes_total",
            "TLS handshakes on the TLS listeners, by result.",
            &["result"],
        );
        let tls_handshakes = ["ok", "failed"].map(|r| tls_handshakes_vec.with_label_values(&[r]));
        let downstream_requests_vec = sharded::CounterVec::new(
            "vestibule_downstream_requests_total",
            "Client requests, by HTTP version and whether the connection is TLS.",
            &["protocol", "tls"],
        );
        let downstream_requests = [
            ("http1", "false"),
            ("http1", "true"),
            ("h2", "false"),
            ("h2", "true"),
        ]
        .map(|(p, t)| downstream_requests_vec.with_label_values(&[p, t]));
        let m = Metrics {
            tls_handshakes,
            tls_handshakes_vec,
            downstream_requests,
            downstream_requests_vec,
            tls_certificate_expiry: gauge_vec(
                "vestibule_tls_certificate_expiry_timestamp_seconds",
                "notAfter of each certificate in service (Unix time), by DNS name.",
                &["name"],
            ),
            api_requests: counter_vec(
                "vestibule_api_requests_total",
                "Requests for the API's reserved path, by room (empty for the JWKS), endpoint and status class.",
                &["room", "endpoint", "status_class"],
            ),
            jwt_issued: counter_vec(
                "vestibule_jwt_issued_total",
                "JWTs signed for admitted visitors, by room.",
                &["room"],
            ),
            jwt_rejected: counter_vec(
                "vestibule_jwt_rejected_total",
                "JWTs presented and refused, by room and reason: malformed, unknown_key, bad_signature, bad_algorithm, expired, not_yet_valid, wrong_issuer, wrong_audience, reset.",
                &["room", "reason"],
            ),
            enqueue_accepted: counter_vec(
                "vestibule_enqueue_accepted_total",
                "Requests whose enqueue token a room accepted, by room.",
                &["room"],
            ),
            enqueue_rejected: counter_vec(
                "vestibule_enqueue_rejected_total",
                "Requests a room refused for their enqueue token, by room and reason: missing, malformed, bad_signature, bad_algorithm, expired, too_long, wrong_audience, no_subject.",
                &["room", "reason"],
            ),
            admin_actions: counter_vec(
                "vestibule_admin_actions_total",
                "Operator actions taken on the admin endpoint, by room, action and operator.",
                &["room", "action", "operator"],
            ),
            admin_refused: counter_vec(
                "vestibule_admin_refused_total",
                "Admin requests refused, by reason: unauthenticated, csrf, origin, role, host, login, login_throttled.",
                &["reason"],
            ),
            audit_errors: IntCounter::new(
                "vestibule_audit_errors_total",
                "Operator actions that could not be appended to the audit log.",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            room_override: int_gauge_vec(
                "vestibule_room_override",
                "Operator overrides in force (1) or not (0), by room and override: paused, sold_out (the room is sold out, by override or config), message.",
                &["room", "override"],
            ),
            room_admit_grants: int_gauge_vec(
                "vestibule_room_admit_grants",
                "Admissions an operator granted with admit and nobody has taken yet, by room.",
                &["room"],
            ),
            room_event_state: int_gauge_vec(
                "vestibule_room_event_state",
                "Each scheduled event's state: 1 for the current one (scheduled, prequeue, running or ended), 0 for the others, by room and event.",
                &["room", "event", "state"],
            ),
            room_new_users_per_minute: int_gauge_vec(
                "vestibule_room_new_users_per_minute",
                "Capacity rooms: the new_users_per_minute in force, by room (the autopilot's value while it steers, a running event's, else the configured one; 0 = no limit).",
                &["room"],
            ),
            room_autopilot_p95: gauge_vec(
                "vestibule_room_autopilot_origin_p95_seconds",
                "Autopilot rooms: the p95 latency of the room's origin answers in the autopilot's last interval (with fewer than 20 answers, of those gathered since it last judged), by room.",
                &["room"],
            ),
            room_autopilot_target: gauge_vec(
                "vestibule_room_autopilot_target_seconds",
                "Autopilot rooms: autopilot_target_latency, by room.",
                &["room"],
            ),
            events: counter_vec(
                "vestibule_events_total",
                "Events out, by sink, type and result: delivered, retried (per attempt), rejected (by the receiver), dropped (queue or spool full, too old, or unwritable).",
                &["sink", "type", "result"],
            ),
            events_spooled: int_gauge_vec(
                "vestibule_events_spooled",
                "Events in a sink's spool waiting for delivery.",
                &["sink"],
            ),
            streams_open: int_gauge_vec(
                "vestibule_streams_open",
                "Visitors' streams (server-sent events of their turn) open on this node.",
                &["room"],
            ),
            events_oldest_spooled: gauge_vec(
                "vestibule_events_oldest_spooled_seconds",
                "Age of a sink's oldest event waiting for delivery; 0 when none waits.",
                &["sink"],
            ),
            store_up: IntGauge::new(
                "vestibule_store_up",
                "1 while the counter store answers (always 1 for the in-process store).",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            store_sync_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "vestibule_store_sync_seconds",
                    "Round trips to the shared store: one sync of this node's counts.",
                )
                .buckets(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                ]),
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            store_errors: IntCounter::new(
                "vestibule_store_errors_total",
                "Syncs with the shared store that failed or timed out.",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            store_bytes: counter_vec(
                "vestibule_store_bytes_total",
                "Bytes of sync payloads exchanged with the shared store, by direction.",
                &["direction"],
            ),
            cluster_nodes: IntGauge::new(
                "vestibule_cluster_nodes",
                "Live nodes sharing the store at the last sync (1 for the in-process store).",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            room_slot_share: gauge_vec(
                "vestibule_room_slot_share",
                "This node's share (0-1) of a capacity room's free slots.",
                &["room"],
            ),
            proxy_protocol_rejected: IntCounter::new(
                "vestibule_proxy_protocol_rejected_total",
                "Connections closed for a missing, invalid, truncated or slow PROXY header.",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            handles: arc_swap::ArcSwapOption::empty(),
            by_class,
            upstream_responses,
            upstream_response_seconds: sharded::Histogram::new(
                "vestibule_upstream_response_seconds",
                "Time from sending a request to the origin to receiving its response header.",
                &UPSTREAM_BOUNDS,
            ),
            config_reloads: IntCounterVec::new(
                Opts::new(
                    "vestibule_config_reloads_total",
                    "Configuration reloads, by result.",
                ),
                &["result"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            config_generation: IntGauge::new(
                "vestibule_config_generation",
                "Generation of the configuration in service; increases with every good reload.",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            upstream_unavailable: IntCounter::new(
                "vestibule_upstream_unavailable_total",
                "Requests answered with the 502 page because no origin could be reached.",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            room_decisions: sharded::CounterVec::new(
                "vestibule_room_decisions_total",
                "Waiting-room decisions, by room, decision and mode (enforce, or shadow: decided and counted, but forwarded).",
                &["room", "decision", "mode"],
            ),
            room_admitted: sharded::CounterVec::new(
                "vestibule_room_admitted_total",
                "Waiting users let in, by room.",
                &["room"],
            ),
            room_challenges: sharded::CounterVec::new(
                "vestibule_room_challenges_total",
                "Proof-of-work challenges of pow rooms, by room and result (issued, solved, failed).",
                &["room", "result"],
            ),
            room_invitations: sharded::CounterVec::new(
                "vestibule_room_invitations_total",
                "Invitations presented by visitors without a place, by room and result (accepted, refused).",
                &["room", "result"],
            ),
            room_arrivals: sharded::CounterVec::new(
                "vestibule_room_arrivals_total",
                "Visitors new to a room: given a first place in line or the pre-queue, or let straight in, by room.",
                &["room"],
            ),
            room_answers: sharded::CounterVec::new(
                "vestibule_room_answers_total",
                "A room's answers, by room and kind: page and json (held visitors' waiting pages, as HTML or JSON), api (its API requests), ratelimited (refused by a rate-limit rule).",
                &["room", "kind"],
            ),
            room_wait_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "vestibule_room_wait_seconds",
                    "Time from a waiting visitor's arrival to their admission, by room (capacity rooms; not those let straight in).",
                )
                .buckets(vestibule_core::history::WAIT_BUCKETS.to_vec()),
                &["room"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            history_errors: IntCounter::new(
                "vestibule_history_errors_total",
                "Per-minute history records that could not be written (admin.history_dir), or old history files that could not be removed.",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            room_allow_percentage: gauge_vec(
                "vestibule_room_allow_percentage",
                "The chance (0-100) that an eligible waiting user gets in right now.",
                &["room"],
            ),
            token_rejected: sharded::CounterVec::new(
                "vestibule_token_rejected_total",
                "Presented room cookies that were not trusted, by room and reason.",
                &["room", "reason"],
            ),
            room_active_users: int_gauge_vec(
                "vestibule_room_active_users",
                "Admitted users active within the session duration (capacity rooms).",
                &["room"],
            ),
            room_queue_number: int_gauge_vec(
                "vestibule_room_queue_number",
                "The last queue number given (rooms with the queue API), counted from the last reset.",
                &["room"],
            ),
            room_serving_number: int_gauge_vec(
                "vestibule_room_serving_number",
                "The serving counter: the highest queue number let in (rooms with the queue API).",
                &["room"],
            ),
            room_waiting_users: int_gauge_vec(
                "vestibule_room_waiting_users",
                "Users waiting and still checking in (capacity rooms), by priority lane.",
                &["room", "lane"],
            ),
            room_wait_estimate: gauge_vec(
                "vestibule_room_wait_estimate_seconds",
                "Estimated wait of a user joining now, seconds, by percentile.",
                &["room", "percentile"],
            ),
            ratelimit_decisions: sharded::CounterVec::new(
                "vestibule_ratelimit_decisions_total",
                "Rate-limit rule verdicts, by rule and outcome.",
                &["rule", "outcome"],
            ),
            ratelimit_penalty_box: IntGaugeVec::new(
                Opts::new(
                    "vestibule_ratelimit_penalty_box_entries",
                    "Keys in each rule's penalty box.",
                ),
                &["rule"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            ratelimit_penalty_box_capacity: IntGaugeVec::new(
                Opts::new(
                    "vestibule_ratelimit_penalty_box_capacity",
                    "Keys each rule's penalty box holds at most; a full box evicts the keys nearest their release.",
                ),
                &["rule"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
            downstream_closed,
            downstream_closed_vec,
            registry,
        };
        m.register_all();
        for result in ["success", "failure"] {
            m.config_reloads.with_label_values(&[result]);
        }
        for direction in ["sent", "received"] {
            m.store_bytes.with_label_values(&[direction]);
        }
        m
    }

    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.upstream_responses.clone()),
            Box::new(self.upstream_response_seconds.clone()),
            Box::new(self.config_reloads.clone()),
            Box::new(self.config_generation.clone()),
            Box::new(self.upstream_unavailable.clone()),
            Box::new(self.room_decisions.clone()),
            Box::new(self.room_admitted.clone()),
            Box::new(self.room_challenges.clone()),
            Box::new(self.room_invitations.clone()),
            Box::new(self.room_arrivals.clone()),
            Box::new(self.room_answers.clone()),
            Box::new(self.room_wait_seconds.clone()),
            Box::new(self.history_errors.clone()),
            Box::new(self.room_allow_percentage.clone()),
            Box::new(self.token_rejected.clone()),
            Box::new(self.room_active_users.clone()),
            Box::new(self.room_queue_number.clone()),
            Box::new(self.room_serving_number.clone()),
            Box::new(self.room_waiting_users.clone()),
            Box::new(self.room_wait_estimate.clone()),
            Box::new(self.ratelimit_decisions.clone()),
            Box::new(self.ratelimit_penalty_box.clone()),
            Box::new(self.ratelimit_penalty_box_capacity.clone()),
            Box::new(self.downstream_closed_vec.clone()),
            Box::new(self.store_up.clone()),
            Box::new(self.store_sync_seconds.clone()),
            Box::new(self.store_errors.clone()),
            Box::new(self.store_bytes.clone()),
            Box::new(self.cluster_nodes.clone()),
            Box::new(self.room_slot_share.clone()),
            Box::new(self.proxy_protocol_rejected.clone()),
            Box::new(self.tls_handshakes_vec.clone()),
            Box::new(self.downstream_requests_vec.clone()),
            Box::new(self.tls_certificate_expiry.clone()),
            Box::new(self.admin_actions.clone()),
            Box::new(self.admin_refused.clone()),
            Box::new(self.audit_errors.clone()),
            Box::new(self.api_requests.clone()),
            Box::new(self.jwt_issued.clone()),
            Box::new(self.jwt_rejected.clone()),
            Box::new(self.enqueue_accepted.clone()),
            Box::new(self.enqueue_rejected.clone()),
            Box::new(self.room_override.clone()),
            Box::new(self.room_admit_grants.clone()),
            Box::new(self.room_event_state.clone()),
            Box::new(self.room_new_users_per_minute.clone()),
            Box::new(self.room_autopilot_p95.clone()),
            Box::new(self.room_autopilot_target.clone()),
            Box::new(self.events.clone()),
            Box::new(self.events_spooled.clone()),
            Box::new(self.streams_open.clone()),
            Box::new(self.events_oldest_spooled.clone()),
        ];
        for c in collectors {
            // Names are unique by construction.
            self.registry
                .register(c)
                .unwrap_or_else(|e| unreachable!("{e}"));
        }
    }

    /// The text exposition of every family.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            log::error!("encoding metrics: {e}");
        }
        out
    }

    /// Creates every labelled series of a snapshot's rooms and rules, so dashboards show zeros
    /// rather than gaps, and refreshes the gauges that are read rather than counted.
    /// The console's counters now: each room's admissions and each rule's denials (limited or
    /// penalized), named as its history keeps them.
    pub fn console_counters(&self, snapshot: &Snapshot) -> Vec<(String, u64)> {
        let rooms = snapshot.rooms.iter().map(|r| {
            (
                crate::recent::room_key(r.name()),
                self.room_admitted.with_label_values(&[r.name()]).get(),
            )
        });
        let rules = snapshot.rules.iter().map(|rule| {
            let name = &rule.config.name;
            let denied = ["limited", "penalized"]
                .iter()
                .map(|o| self.ratelimit_decisions.with_label_values(&[name, o]).get())
                .sum();
            (crate::recent::rule_key(name), denied)
        });
        rooms.chain(rules).collect()
    }

    pub fn refresh(&self, snapshot: &Snapshot, store: &dyn CounterStore) {
        let now = crate::time::now();
        match store.cluster() {
            Some(c) => {
                self.store_up.set(i64::from(c.up));
                self.cluster_nodes.set(c.nodes as i64);
            }
            None => {
                self.store_up.set(1);
                self.cluster_nodes.set(1);
            }
        }
        // The API's series, so the family shows from the start.
        for (endpoint, class) in [("jwks", "2xx"), ("unknown", "4xx")] {
            self.api_requests.with_label_values(&["", endpoint, class]);
        }
        self.tls_certificate_expiry.reset();
        if let Some(tls) = &snapshot.tls {
            // In the order SNI prefers them: a name on two certificates shows the first one's.
            for cert in tls.certs.iter().rev() {
                for name in &cert.names {
                    self.tls_certificate_expiry
                        .with_label_values(&[name])
                        .set(cert.not_after as f64);
                }
            }
        }
        self.room_slot_share.reset();
        self.room_override.reset();
        self.room_admit_grants.reset();
        self.room_event_state.reset();
        self.room_new_users_per_minute.reset();
        self.room_autopilot_p95.reset();
        self.room_autopilot_target.reset();
        self.room_allow_percentage.reset();
        self.room_active_users.reset();
        self.room_queue_number.reset();
        self.room_serving_number.reset();
        self.room_waiting_users.reset();
        self.room_wait_estimate.reset();
        for room in snapshot.rooms.iter() {
            self.room_series(room);
            // Every action by every operator who may act, so the dashboard shows zeros.
            for op in &snapshot.config.admin.operators {
                if op.role == crate::config::Role::Operator {
                    for action in crate::controls::Action::LABELS {
                        self.admin_actions
                            .with_label_values(&[room.name(), action, &op.name]);
                    }
                }
            }
            self.room_controls(room, store, now);
            self.room_figures(room, store, now);
        }
        self.ratelimit_penalty_box.reset();
        self.ratelimit_penalty_box_capacity.reset();
        for rule in snapshot.rules.iter() {
            self.ratelimit_penalty_box_capacity
                .with_label_values(&[rule.name()])
                .set(rule.penalty_box_capacity() as i64);
            for o in Outcome::ALL {
                self.ratelimit_decisions
                    .with_label_values(&[rule.name(), o.as_str()]);
            }
            self.ratelimit_penalty_box
                .with_label_values(&[rule.name()])
                .set(rule.penalty_box_len(now) as i64);
        }
        self.config_generation.set(snapshot.generation as i64);
    }

    /// Every labelled counter series of `room`, created so dashboards show zeros, not gaps.
    fn room_series(&self, room: &crate::room::Room) {
        let name = room.name();
        // Counted up and down by the streams themselves: touched, never reset.
        self.streams_open.with_label_values(&[name]);
        for d in Decision::ALL {
            self.room_decisions
                .with_label_values(&[name, d.as_str(), room.config.mode.as_str()]);
        }
        for r in Reject::ALL {
            self.token_rejected.with_label_values(&[name, r.as_str()]);
        }
        self.room_admitted.with_label_values(&[name]);
        self.room_arrivals.with_label_values(&[name]);
        self.room_wait_seconds.with_label_values(&[name]);
        for kind in ANSWER_KINDS {
            self.room_answers.with_label_values(&[name, kind]);
        }
        if room.config.jwt.is_some() {
            self.jwt_issued.with_label_values(&[name]);
            for r in crate::jwt::Refusal::ALL {
                self.jwt_rejected.with_label_values(&[name, r.as_str()]);
            }
        }
        if room.config.enqueue.is_some() {
            self.enqueue_accepted.with_label_values(&[name]);
            for r in crate::enqueue::Refusal::ALL {
                self.enqueue_rejected.with_label_values(&[name, r.as_str()]);
            }
        }
        for result in INVITATION_RESULTS {
            self.room_invitations.with_label_values(&[name, result]);
        }
        if room.config.challenge.is_some() {
            for result in CHALLENGE_RESULTS {
                self.room_challenges.with_label_values(&[name, result]);
            }
        }
    }

    /// The operator's overrides, grants and the events' states of `room`.
    fn room_controls(
        &self,
        room: &crate::room::Room,
        store: &dyn CounterStore,
        now: crate::time::Timestamp,
    ) {
        let name = room.name();
        let held = room.controls().held();
        for (key, on) in [
            ("paused", held.paused),
            ("sold_out", room.sold_out()),
            ("message", room.controls().message().is_some()),
            ("pace", room.controls().pace(now).is_some()),
        ] {
            self.room_override
                .with_label_values(&[name, key])
                .set(i64::from(on));
        }
        self.room_admit_grants
            .with_label_values(&[name])
            .set(crate::controls::grants_left(store, name, now) as i64);
        for event in &room.config.events {
            let current = EventState::of(event, now);
            for state in EventState::ALL {
                self.room_event_state
                    .with_label_values(&[name, &event.name, state.as_str()])
                    .set(i64::from(state == current));
            }
        }
    }

    /// What `room` admits now: its pace or percentage, its autopilot, its active and waiting
    /// users and their wait estimates.
    fn room_figures(
        &self,
        room: &crate::room::Room,
        store: &dyn CounterStore,
        now: crate::time::Timestamp,
    ) {
        let name = room.name();
        self.room_allow_percentage
            .with_label_values(&[name])
            .set(room.effective_allow_percentage(now));
        if let Some(pace) = room.effective_new_users_per_minute(now) {
            self.room_new_users_per_minute
                .with_label_values(&[name])
                .set(pace as i64);
        }
        if let Some(a) = room.pilot().status() {
            self.room_autopilot_target
                .with_label_values(&[name])
                .set(a.target_latency_ms as f64 / 1000.0);
            if let Some(ms) = a.last_interval.and_then(|i| i.p95_ms) {
                self.room_autopilot_p95
                    .with_label_values(&[name])
                    .set(ms as f64 / 1000.0);
            }
        }
        if let Some(queue) = room.numbered(now) {
            self.room_queue_number
                .with_label_values(&[name])
                .set(queue.last_number() as i64);
            self.room_serving_number
                .with_label_values(&[name])
                .set(queue.serving_number() as i64);
        }
        if let Some(f) = room.figures(now) {
            self.room_slot_share
                .with_label_values(&[name])
                .set(store.allotment(name).fraction());
            self.room_active_users
                .with_label_values(&[name])
                .set(f.active as i64);
            for lane in &f.lanes {
                self.room_waiting_users
                    .with_label_values(&[name, &lane.name])
                    .set(lane.waiting as i64);
            }
            let e = f.estimates;
            for (q, v) in [("25", e.p25), ("50", e.p50), ("75", e.p75)] {
                if let Some(minutes) = v {
                    self.room_wait_estimate
                        .with_label_values(&[name, q])
                        .set(minutes * 60.0);
                }
            }
        }
    }

    /// Calls `f` with the counter handles for `snapshot`'s rooms and rules (built on first use
    /// per generation). Borrowed through arc-swap's thread-local guard rather than cloned, so
    /// requests do not write a shared reference count.
    pub(crate) fn with_handles<R>(&self, snapshot: &Snapshot, f: impl FnOnce(&Handles) -> R) -> R {
        {
            let current = self.handles.load();
            if let Some(h) = &*current {
                if h.generation == snapshot.generation {
                    return f(h);
                }
            }
        }
        let rooms = snapshot
            .rooms
            .iter()
            .map(|room| {
                let name = room.name();
                RoomHandles {
                    decisions: Decision::ALL.map(|d| {
                        self.room_decisions.with_label_values(&[
                            name,
                            d.as_str(),
                            room.config.mode.as_str(),
                        ])
                    }),
                    admitted: self.room_admitted.with_label_values(&[name]),
                    rejected: Reject::ALL
                        .map(|r| self.token_rejected.with_label_values(&[name, r.as_str()])),
                    challenges: room.config.challenge.map(|_| {
                        CHALLENGE_RESULTS
                            .map(|r| self.room_challenges.with_label_values(&[name, r]))
                    }),
                    invitations: INVITATION_RESULTS
                        .map(|r| self.room_invitations.with_label_values(&[name, r])),
                    arrivals: self.room_arrivals.with_label_values(&[name]),
                    wait: self.room_wait_seconds.with_label_values(&[name]),
                    answers: ANSWER_KINDS.map(|k| self.room_answers.with_label_values(&[name, k])),
                }
            })
            .collect();
        let rules = snapshot
            .rules
            .iter()
            .map(|rule| {
                Outcome::ALL.map(|o| {
                    self.ratelimit_decisions
                        .with_label_values(&[rule.name(), o.as_str()])
                })
            })
            .collect();
        let h = std::sync::Arc::new(Handles {
            generation: snapshot.generation,
            rooms,
            rules,
        });
        self.handles.store(Some(h.clone()));
        f(&h)
    }

    /// Counts one answer of the room at `room` (its position in `snapshot`).
    pub(crate) fn count_answer(&self, snapshot: &Snapshot, room: usize, kind: AnswerKind) {
        self.with_handles(snapshot, |h| {
            if let Some(r) = h.rooms.get(room) {
                r.answers[kind as usize].inc();
            }
        });
    }

    /// Counts one origin response.
    pub(crate) fn observe_upstream(&self, status: u16, seconds: Option<f64>) {
        let class = match status {
            100..=199 => 0,
            200..=299 => 1,
            300..=399 => 2,
            400..=499 => 3,
            _ => 4,
        };
        self.by_class[class].inc();
        if let Some(s) = seconds {
            self.upstream_response_seconds.observe(s);
        }
    }
}

impl crate::history::Counters for Metrics {
    /// Each room's totals now, by room name, for the history.
    fn room_totals(&self, snapshot: &Snapshot) -> Vec<(String, RoomTotals)> {
        snapshot
            .rooms
            .iter()
            .map(|room| {
                let name = room.name();
                let get =
                    |v: &sharded::CounterVec, labels: &[&str]| v.with_label_values(labels).get();
                let wait = self.room_wait_seconds.with_label_values(&[name]).metric();
                let h = wait.get_histogram();
                let mut below = 0u64;
                let mut wait_buckets: Vec<u64> = h
                    .get_bucket()
                    .iter()
                    .map(|b| {
                        let c = b.cumulative_count().saturating_sub(below);
                        below = b.cumulative_count();
                        c
                    })
                    .collect();
                wait_buckets.push(h.get_sample_count().saturating_sub(below));
                let totals = RoomTotals {
                    arrivals: get(&self.room_arrivals, &[name]),
                    admitted: get(&self.room_admitted, &[name]),
                    wait_buckets,
                    answers: ANSWER_KINDS.map(|k| get(&self.room_answers, &[name, k])),
                    // Read only where they exist: reading creates a series.
                    challenges: match room.config.challenge {
                        Some(_) => {
                            ["issued", "solved"].map(|r| get(&self.room_challenges, &[name, r]))
                        }
                        None => [0, 0],
                    },
                    invitations: INVITATION_RESULTS
                        .map(|r| get(&self.room_invitations, &[name, r])),
                };
                (name.to_owned(), totals)
            })
            .collect()
    }

    /// The upper bounds of `vestibule_upstream_response_seconds`.
    fn upstream_bounds(&self) -> &[f64] {
        &UPSTREAM_BOUNDS
    }

    /// The node's origin totals now, for the history.
    fn origin_totals(&self) -> OriginTotals {
        let (_, _, cumulative) = self.upstream_response_seconds.get();
        OriginTotals {
            cumulative,
            errors: self.by_class[4].get() + self.upstream_unavailable.get(),
        }
    }

    fn history_error(&self) {
        self.history_errors.inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_help_and_type() {
        let m = Metrics::new();
        m.observe_upstream(204, Some(0.003));
        m.observe_upstream(503, None);
        let text = String::from_utf8(m.render()).unwrap();
        for family in [
            "vestibule_upstream_responses_total",
            "vestibule_upstream_response_seconds",
            "vestibule_config_reloads_total",
            "vestibule_config_generation",
        ] {
            assert!(text.contains(&format!("# HELP {family} ")), "{family}");
            assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
        }
        assert!(text.contains("vestibule_upstream_responses_total{status_class=\"2xx\"} 1"));
        assert!(text.contains("vestibule_upstream_responses_total{status_class=\"5xx\"} 1"));
    }
}
