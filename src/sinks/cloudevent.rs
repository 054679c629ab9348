//! An event as emitted, and its CloudEvents 1.0 JSON (structured mode).

use std::net::IpAddr;

use serde::Serialize;
use serde_json::Value;

/// One event, from where it happened to the writer thread.
#[derive(Debug)]
pub struct Event {
    /// Unique: 128 random bits, hex. Receivers de-duplicate by it.
    id: String,
    /// A name of `vestibule_core::config::sinks::EVENT_TYPES`.
    kind: &'static str,
    room: Option<String>,
    /// Unix milliseconds.
    time_ms: u64,
    data: Value,
    /// Added to `data` as `client_ip` for sinks with `include_client_ip` only.
    client_ip: Option<IpAddr>,
}

#[derive(Serialize)]
struct CloudEvent<'a> {
    specversion: &'static str,
    id: &'a str,
    source: &'a str,
    #[serde(rename = "type")]
    kind: String,
    time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<&'a str>,
    datacontenttype: &'static str,
    data: &'a Value,
}

impl Event {
    pub fn new(
        kind: &'static str,
        room: Option<&str>,
        client_ip: Option<IpAddr>,
        data: Value,
    ) -> Event {
        use rand::RngCore;
        let mut id = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut id);
        Event {
            id: hex::encode(id),
            kind,
            room: room.map(str::to_owned),
            time_ms: crate::time::now().millis(),
            data,
            client_ip,
        }
    }

    pub fn kind(&self) -> &'static str {
        self.kind
    }

    pub fn room(&self) -> Option<&str> {
        self.room.as_deref()
    }

    /// The CloudEvents JSON: `source` is this node, `subject` the room, `time` RFC 3339 to the
    /// millisecond.
    pub fn to_json(&self, source: &str, include_client_ip: bool) -> Vec<u8> {
        let with_ip;
        let data = match (self.client_ip, include_client_ip, &self.data) {
            (Some(ip), true, Value::Object(map)) => {
                let mut map = map.clone();
                map.insert(
                    "client_ip".into(),
                    Value::String(crate::identity::ip_text(ip)),
                );
                with_ip = Value::Object(map);
                &with_ip
            }
            _ => &self.data,
        };
        let time = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.time_ms),
        )
        .to_string();
        let event = CloudEvent {
            specversion: "1.0",
            id: &self.id,
            source,
            kind: format!("vestibule.{}", self.kind),
            time,
            subject: self.room.as_deref(),
            datacontenttype: "application/json",
            data,
        };
        serde_json::to_vec(&event).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_cloudevents_and_carry_the_address_only_when_asked() {
        let e = Event::new(
            "admission.granted",
            Some("shop"),
            Some("192.0.2.7".parse().unwrap()),
            serde_json::json!({"room": "shop"}),
        );
        let plain: Value = serde_json::from_slice(&e.to_json("node-1", false)).unwrap();
        assert_eq!(plain["specversion"], "1.0");
        assert_eq!(plain["type"], "vestibule.admission.granted");
        assert_eq!(plain["source"], "node-1");
        assert_eq!(plain["subject"], "shop");
        assert_eq!(plain["id"].as_str().unwrap().len(), 32);
        assert!(plain["time"].as_str().unwrap().ends_with('Z'));
        assert!(plain["data"].get("client_ip").is_none());
        let with: Value = serde_json::from_slice(&e.to_json("node-1", true)).unwrap();
        assert_eq!(with["data"]["client_ip"], "192.0.2.7");
        assert_eq!(
            with["id"], plain["id"],
            "one event, one id, whatever the sink"
        );
        let other = Event::new("room.minute", None, None, Value::Null);
        assert_ne!(other.id, e.id);
        let none: Value = serde_json::from_slice(&other.to_json("n", true)).unwrap();
        assert!(none.get("subject").is_none());
    }
}
