//! The events, one method each, called from where they happen: what each carries.

use std::collections::HashMap;

use serde_json::{json, Value};
use vestibule_core::decide::Notes;
use vestibule_core::history::Minute;
use vestibule_core::room::event::EventState;

use super::Events;
use crate::snapshot::Snapshot;
use crate::time::Timestamp;

impl Events {
    /// `admission.granted`: a request let a visitor into its room (the proxy's count of it).
    /// The visitor is named by a keyed hash of their identity; their address reaches only the
    /// sinks with `include_client_ip`.
    pub fn admission_granted(&self, snapshot: &Snapshot, notes: &Notes) {
        let Some(admitted) = &notes.admitted else {
            return;
        };
        let Some(room) = notes.room.and_then(|i| snapshot.rooms.get(i)) else {
            return;
        };
        let waited = notes.counted.as_ref().and_then(|(_, c)| c.waited_secs);
        self.emit(
            "admission.granted",
            Some(room.name()),
            notes.client_ip,
            || {
                let now = crate::time::now();
                json!({
                    "room": room.name(),
                    "identity": snapshot
                        .keys
                        .as_ref()
                        .map(|k| k.active().identity_hash(admitted.identity.as_str())),
                    "queue_number": admitted.queue_number,
                    "lane": admitted.lane.as_deref(),
                    "waited_seconds": waited,
                    "from_line": waited.is_some(),
                    "mode": room.config.mode.as_str(),
                    "via": "request",
                    "event": vestibule_core::room::event::in_force(&room.config.events, now)
                        .map(|p| p.event.name.clone()),
                })
            },
        );
    }

    /// `admission.granted` for a JWT issued for a queue number (`via`: `api`, the queue API's
    /// token endpoint; `admin`, an operator's `POST /rooms/<room>/tokens`). The caller of the
    /// API is not the visitor, so no identity is sent.
    pub fn jwt_issued(&self, room: &str, request_id: &str, via: &'static str) {
        let queue_number = request_id
            .split('.')
            .next()
            .and_then(|n| n.parse::<u64>().ok());
        self.emit("admission.granted", Some(room), None, || {
            json!({
                "room": room,
                "identity": null,
                "queue_number": queue_number,
                "lane": null,
                "waited_seconds": null,
                "from_line": true,
                "mode": "enforce",
                "event": null,
                "via": via,
            })
        });
    }

    /// `operator.action`: the audit log's record of an operator's action (the operator's
    /// address included).
    pub fn operator_action(&self, room: &str, record: &Value) {
        self.emit("operator.action", Some(room), None, || record.clone());
    }

    /// `room.minute`: each room's record of a minute, as the history writes it.
    pub fn room_minutes(&self, records: &[Minute]) {
        for r in records {
            self.emit("room.minute", Some(&r.room), None, || {
                serde_json::to_value(r).unwrap_or(Value::Null)
            });
        }
    }

    /// `session.updated`: an admitted visitor's session changed: `revoked` (the origin answered
    /// `Vestibule-Command: revoke`), or `completed` / `abandoned` (marked through the queue
    /// API's `PUT sessions/<request_id>`, which names its `queue_number`).
    pub fn session_updated(
        &self,
        room: &str,
        status: &'static str,
        queue_number: Option<u64>,
        client_ip: Option<std::net::IpAddr>,
    ) {
        self.emit("session.updated", Some(room), client_ip, || {
            let mut data = json!({ "room": room, "status": status });
            if let Some(n) = queue_number {
                data["queue_number"] = json!(n);
            }
            data
        });
    }

    /// `serving.moved`: a fifo room's serving counter was moved by hand (`why`: `operator`,
    /// through `POST /rooms/<room>/serving`), from one number to another.
    pub fn serving_moved(&self, room: &str, from: u64, to: u64, why: &'static str) {
        self.emit(
            "serving.moved",
            Some(room),
            None,
            || json!({ "room": room, "from": from, "to": to, "why": why }),
        );
    }

    /// `store.state_changed`: the cluster's store answered after it did not (or at the first
    /// sync), or stopped answering. `from` is null at the first sync; `nodes` the live nodes
    /// it reported when up.
    pub fn store_state_changed(&self, from: Option<bool>, up: bool, nodes: Option<u64>) {
        let word = |up: bool| if up { "up" } else { "down" };
        self.emit("store.state_changed", None, None, || {
            json!({
                "store": "redis",
                "from": from.map(word),
                "to": word(up),
                "nodes": nodes,
            })
        });
    }

    /// The sinks' state, when a sink wants events of `kind` (none: nothing to look at).
    fn wanting(&self, kind: &str) -> Option<&super::Inner> {
        let inner = self.inner.as_ref()?;
        inner
            .sinks
            .iter()
            .any(|s| s.types.is_empty() || s.types.iter().any(|t| t == kind))
            .then_some(inner)
    }

    /// `serving.moved` with `why: "minute"`: once a minute, each queue API room's serving
    /// counter, if it moved since the minute before (by admissions, or an operator's move,
    /// which is also sent on its own). Called once a second; the first look after a start
    /// notes the counters without an event.
    pub fn serving_counters(&self, snapshot: &Snapshot, now: Timestamp) {
        let Some(inner) = self.wanting("serving.moved") else {
            return;
        };
        let mut seen = inner.serving.lock().unwrap_or_else(|p| p.into_inner());
        if seen.0 == now.minute() {
            return;
        }
        seen.0 = now.minute();
        let mut now_seen = HashMap::new();
        for room in snapshot.rooms.iter() {
            let Some(queue) = room.numbered(now) else {
                continue;
            };
            let to = queue.serving_number();
            if let Some(&from) = seen.1.get(room.name()) {
                if from != to {
                    self.emit(
                        "serving.moved",
                        Some(room.name()),
                        None,
                        || json!({ "room": room.name(), "from": from, "to": to, "why": "minute" }),
                    );
                }
            }
            now_seen.insert(room.name().to_owned(), to);
        }
        seen.1 = now_seen;
    }

    /// `event.state_changed`: a scheduled event moved from one state to the next (scheduled,
    /// prequeue, running, ended). Called once a second; the first look at an event after a
    /// start or a reload notes its state without an event.
    pub fn event_states(&self, snapshot: &Snapshot, now: Timestamp) {
        let Some(inner) = self.wanting("event.state_changed") else {
            return;
        };
        let mut seen = inner.states.lock().unwrap_or_else(|p| p.into_inner());
        let mut now_seen: HashMap<(String, String), EventState> = HashMap::new();
        for room in snapshot.rooms.iter() {
            for event in &room.config.events {
                let state = EventState::of(event, now);
                let key = (room.name().to_owned(), event.name.clone());
                if let Some(before) = seen.get(&key) {
                    if *before != state {
                        self.emit("event.state_changed", Some(room.name()), None, || {
                            json!({
                                "room": room.name(),
                                "event": event.name,
                                "from": before.as_str(),
                                "to": state.as_str(),
                            })
                        });
                    }
                }
                now_seen.insert(key, state);
            }
        }
        *seen = now_seen;
    }
}
