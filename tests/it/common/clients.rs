//! HTTP clients and what they read: the test client, the origin's echo, cookies, and a visitor
//! with an address and a room cookie of its own ([`User`]).

use std::time::Duration;

use super::*;

/// A client that follows no redirects and keeps no cookies: tests see every header.
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// The origin's view of a request: (method, path, headers in order).
pub fn echo_headers(body: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(body).expect("echo JSON");
    v["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().unwrap_or_default().to_owned(),
                pair[1].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

pub fn header_values(headers: &[(String, String)], name: &str) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

/// Every `Set-Cookie` value of a response.
pub fn set_cookies(resp: &reqwest::blocking::Response) -> Vec<&str> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .map(|h| h.to_str().expect("Set-Cookie is text"))
        .collect()
}

/// Trust the test client's `X-Forwarded-For`, so each test user can have an address of its own.
pub const TRUST_LOCAL: &str = "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]";

/// The value a response's `Set-Cookie` gives cookie `name`, if it sets it.
pub fn room_cookie(resp: &reqwest::blocking::Response, name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    set_cookies(resp).into_iter().find_map(|v| {
        v.strip_prefix(&prefix)
            .map(|rest| rest.split(';').next().unwrap_or("").to_owned())
    })
}

/// One visitor with an address of its own (through [`TRUST_LOCAL`]) and a cookie jar holding one
/// room cookie, asking for JSON so decisions are easy to read.
pub struct User {
    pub ip: String,
    pub cookie_name: String,
    pub cookie: Option<String>,
}

impl User {
    /// User number `i`, at `10.1.x.y`.
    pub fn new(i: u32) -> User {
        User::at(&format!("10.1.{}.{}", i / 256, i % 256))
    }

    pub fn at(ip: &str) -> User {
        User {
            ip: ip.to_owned(),
            cookie_name: "waiting_room".into(),
            cookie: None,
        }
    }

    /// The same user, holding the cookie of a room with another `cookie_name`.
    pub fn with_cookie_name(mut self, name: &str) -> User {
        self.cookie_name = name.to_owned();
        self
    }

    /// A GET that keeps whatever room cookie the answer sets (and forgets a deleted one).
    pub fn get(&mut self, v: &Vestibule, path: &str) -> reqwest::blocking::Response {
        let mut req = client()
            .get(v.url(path))
            .header("X-Forwarded-For", &self.ip)
            .header("Accept", "application/json");
        if let Some(c) = &self.cookie {
            req = req.header("Cookie", format!("{}={c}", self.cookie_name));
        }
        let resp = req.send().expect("the proxy answers");
        if let Some(value) = room_cookie(&resp, &self.cookie_name) {
            self.cookie = (value != "deleted").then_some(value);
        }
        resp
    }

    /// "allow" when the origin answered, else the room's JSON decision; and the JSON.
    pub fn decision(&mut self, v: &Vestibule) -> (String, serde_json::Value) {
        let body: serde_json::Value = self.get(v, "/__echo").json().expect("JSON");
        (decision_in(&body), body)
    }
}

/// "allow" for the demo origin's echo, else the `decision` of a room's JSON answer.
pub fn decision_in(body: &serde_json::Value) -> String {
    if body.get("headers").is_some() {
        return "allow".into();
    }
    body["decision"]
        .as_str()
        .unwrap_or_else(|| panic!("no decision in {body}"))
        .to_owned()
}
