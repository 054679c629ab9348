//! A reference client for a proof-of-work room, for apps that talk JSON to a site
//! behind vestibule.
//!
//! ```text
//! cargo run --release --example pow_solve -- http://127.0.0.1:8080/sale/ [--header 'Name: value']...
//! ```
//!
//! It asks with `Accept: application/json`. When the answer is a challenge
//! (`{"decision": "challenge", "challenge": {"algorithm": "sha256", "difficulty": 16,
//! "value": "...", "expires_in": 300}}`), it finds the first decimal nonce such that
//! SHA-256(`value` ":" nonce) begins with `difficulty` zero bits, and asks again with the header
//! `Vestibule-Solution: value:nonce`. It then keeps the room cookie it is given, as any client
//! must, and prints one JSON line: what it was asked, the work, and the answer it got.
//!
//! The solver is [`solve`] below: about 2^difficulty hashes, and nothing else to know.

use std::time::Instant;

use sha2::{Digest, Sha256};

/// The first nonce from 0 that solves `value` at `difficulty`, and how many hashes it took.
fn solve(value: &str, difficulty: u32) -> (u64, u64) {
    let mut prefix = Sha256::new();
    prefix.update(value.as_bytes());
    prefix.update(b":");
    for nonce in 0u64.. {
        let mut h = prefix.clone();
        h.update(nonce.to_string().as_bytes());
        if leading_zero_bits(&h.finalize()) >= difficulty {
            return (nonce, nonce + 1);
        }
    }
    unreachable!("a u64 of nonces always holds a solution")
}

fn leading_zero_bits(hash: &[u8]) -> u32 {
    let mut bits = 0;
    for &b in hash {
        if b != 0 {
            return bits + b.leading_zeros();
        }
        bits += 8;
    }
    bits
}

/// `name=value` of every `Set-Cookie` that does not remove its cookie.
fn cookies_set(resp: &reqwest::blocking::Response) -> Vec<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .filter(|pair| !pair.ends_with('=') && !pair.ends_with("=deleted"))
        .map(str::to_owned)
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: pow_solve URL [--header 'Name: value']...")?;
    let mut headers = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--header" => {
                let h = args.next().ok_or("--header needs 'Name: value'")?;
                let (name, value) = h.split_once(':').ok_or("--header needs 'Name: value'")?;
                headers.push((name.trim().to_owned(), value.trim().to_owned()));
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let client = reqwest::blocking::Client::new();
    let ask = |solution: Option<&str>| {
        let mut req = client.get(&url).header("Accept", "application/json");
        for (name, value) in &headers {
            req = req.header(name, value);
        }
        if let Some(s) = solution {
            req = req.header("Vestibule-Solution", s);
        }
        req.send()
    };

    let first = ask(None)?;
    let body: serde_json::Value = first.json()?;
    if body["decision"] != "challenge" {
        println!(
            "{}",
            serde_json::json!({ "challenged": false, "answer": body })
        );
        return Ok(());
    }
    let c = &body["challenge"];
    if c["algorithm"] != "sha256" {
        return Err(format!("unknown algorithm {}", c["algorithm"]).into());
    }
    let value = c["value"].as_str().ok_or("no challenge value")?;
    let difficulty = c["difficulty"].as_u64().ok_or("no difficulty")? as u32;
    let started = Instant::now();
    let (nonce, hashes) = solve(value, difficulty);
    let solve_ms = started.elapsed().as_secs_f64() * 1000.0;

    let second = ask(Some(&format!("{value}:{nonce}")))?;
    let status = second.status().as_u16();
    let cookies = cookies_set(&second);
    let answer: serde_json::Value = second
        .json()
        .unwrap_or_else(|_| serde_json::json!({ "decision": "allow" }));
    let decision = answer["decision"].as_str().unwrap_or("allow");
    println!(
        "{}",
        serde_json::json!({
            "challenged": true,
            "difficulty": difficulty,
            "hashes": hashes,
            "solve_ms": solve_ms,
            "status": status,
            "decision": decision,
            "cookies": cookies,
        })
    );
    Ok(())
}
