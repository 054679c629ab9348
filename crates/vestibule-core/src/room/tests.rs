//! The room's unit tests: routing, cookies, invitations; and helpers the rooms' tests share.

use super::*;
use crate::controls::{PaceKey, RoomOverrides, Stamp};
use crate::token::Reject;

pub use crate::keys::testing::ring;

pub fn store() -> Arc<dyn CounterStore> {
    Arc::new(crate::store::local::LocalStore::new())
}

pub fn alice() -> Identity {
    Identity::of_ip("192.0.2.10".parse().unwrap(), 64)
}

pub fn bob() -> Identity {
    Identity::of_ip("192.0.2.11".parse().unwrap(), 64)
}

pub fn presented(ring: &KeyRing, uid: &Identity, value: Option<&str>, now: Timestamp) -> Presented {
    let values: Vec<&[u8]> = value.map(str::as_bytes).into_iter().collect();
    Presented::check(ring, uid, &values, Binding::ANY, now)
}

pub use super::testing::rooms;

fn routed(set: &RoomSet, host: &str, path: &str, ip: &str) -> Option<(String, bool)> {
    let path = crate::path::normalize(path).unwrap();
    set.route(host, &path, ip.parse().unwrap())
        .map(|r| (r.room.name().to_owned(), r.bypass))
}

#[test]
fn longest_prefix_and_host_win() {
    let set = rooms(
        "[[room]]\nname = \"site\"\n\
         [[room]]\nname = \"checkout\"\npaths = [\"/checkout\"]\ncookie_name = \"wr_checkout\"\n\
         [[room]]\nname = \"shop\"\nhosts = [\"shop.example\", \"*.shop.example\"]\npaths = [\"/\"]\ncookie_name = \"wr_shop\"\nbypass_paths = [\"/static/\"]\nbypass_cidrs = [\"10.0.0.0/8\"]\n",
    );
    let r = |h, p| routed(&set, h, p, "192.0.2.1");
    assert_eq!(r("a.example", "/"), Some(("site".into(), false)));
    assert_eq!(
        r("a.example", "/checkout/pay"),
        Some(("checkout".into(), false))
    );
    assert_eq!(r("shop.example", "/"), Some(("shop".into(), false)));
    assert_eq!(r("eu.shop.example", "/x"), Some(("shop".into(), false)));
    // The longer prefix wins even over a host match.
    assert_eq!(
        r("shop.example", "/checkout"),
        Some(("checkout".into(), false))
    );
    assert_eq!(
        r("shop.example", "/static/app.css"),
        Some(("shop".into(), true))
    );
    assert_eq!(
        routed(&set, "shop.example", "/", "10.1.2.3"),
        Some(("shop".into(), true))
    );
    assert_eq!(
        set.cookie_names(),
        ["waiting_room", "wr_checkout", "wr_shop"]
    );
}

#[test]
fn unguarded_paths_have_no_room() {
    let set = rooms("[[room]]\npaths = [\"/tickets\"]\n");
    assert!(routed(&set, "x", "/", "192.0.2.1").is_none());
    assert!(routed(&set, "x", "/tickets/1", "192.0.2.1").is_some());
}

#[test]
fn disabled_rooms_bypass() {
    let set = rooms("[[room]]\nenabled = false\nallow_percentage = 0\n");
    let room = set.iter().next().unwrap();
    let now = Timestamp::from_secs(1);
    let o = room.decide(&ring(), &alice(), &[], now);
    assert_eq!(
        (o.decision, o.cookie),
        (Decision::Bypass, CookieAction::Keep)
    );
    assert_eq!(room.effective_allow_percentage(now), 100.0);
}

#[test]
fn first_valid_candidate_wins_and_rejections_are_reported() {
    let set = rooms("[[room]]\nallow_percentage = 100\n");
    let room = set.iter().next().unwrap();
    let ring = ring();
    let now = Timestamp::from_secs(1_000);
    let good = crate::token::Claims::new(crate::token::Dec::Allow, 5_000, &alice(), "key1")
        .sign(ring.active());
    let o = room.decide(&ring, &alice(), &[b"junk", good.as_bytes()], now);
    assert_eq!(o.decision, Decision::Allow);
    assert_eq!(o.rejected, None);
    let o = room.decide(&ring, &bob(), &[good.as_bytes()], now);
    assert_eq!(o.rejected, Some(Reject::WrongUser));
    let o = room.decide(&ring, &alice(), &[b"junk"], now);
    assert_eq!(o.rejected, Some(Reject::Malformed));
}

fn code(ring: &KeyRing, room: &str, uses: u32) -> String {
    crate::invite::make(
        ring.active(),
        &crate::invite::Terms {
            room: room.into(),
            lane: "public".into(),
            exp: 10_000,
            uses,
        },
    )
}

fn bringing(code: &str) -> Brought<'_> {
    Brought {
        solution: None,
        invitation: Some(code.as_bytes()),
    }
}

#[test]
fn an_invite_room_lets_in_only_the_invited_and_as_many_as_invited() {
    let set = rooms(
        "[[room]]\nname = \"presale\"\naccess = \"invite\"\nallow_percentage = 0\n\
         [[room]]\nname = \"shop\"\npaths = [\"/shop\"]\ncookie_name = \"shop\"\nallow_percentage = 0\n",
    );
    let (presale, shop) = (set.get(0).unwrap(), set.get(1).unwrap());
    let ring = ring();
    let now = Timestamp::from_secs(1_000);
    let uninvited = presale.decide(&ring, &alice(), &[], now);
    assert_eq!(
        (uninvited.decision, &uninvited.cookie, uninvited.invitation),
        (Decision::Uninvited, &CookieAction::Keep, None)
    );

    let one = code(&ring, "presale", 1);
    let o = presale.decide_bringing(&ring, &alice(), &[], bringing(&one), now);
    assert_eq!((o.decision, o.invitation), (Decision::Deny, Some(Ok(()))));
    let CookieAction::Set(token) = o.cookie else {
        panic!("no token for an invited visitor: {o:?}")
    };
    assert!(token.contains("&rm=presale&"), "{token}");
    // The token is the place from then on.
    let o = presale.decide(&ring, &alice(), &[token.as_bytes()], now);
    assert_eq!((o.decision, o.rejected), (Decision::Deny, None));
    // Its one use is taken: another identity is refused, the same one joins again.
    let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&one), now);
    assert_eq!(
        (o.decision, o.invitation),
        (Decision::Uninvited, Some(Err(Refusal::UsedUp)))
    );
    let o = presale.decide_bringing(&ring, &alice(), &[], bringing(&one), now);
    assert_eq!(o.invitation, Some(Ok(())));
    assert_eq!(presale.invitations_in_use(now).invitations, 1);
    assert_eq!(presale.invitations_in_use(now).holders, 1);

    // A code of another room, and a place got in another room, are no way in.
    let other = code(&ring, "shop", 5);
    let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&other), now);
    assert_eq!(o.invitation, Some(Err(Refusal::BadSignature)));
    let CookieAction::Set(shop_token) = shop.decide(&ring, &bob(), &[], now).cookie else {
        panic!("the open room gives a token")
    };
    let o = presale.decide(&ring, &bob(), &[shop_token.as_bytes()], now);
    assert_eq!(
        (o.decision, o.rejected),
        (Decision::Uninvited, Some(Reject::WrongRoom))
    );
    // Nor is the presale's token a place in the shop.
    let o = shop.decide(&ring, &alice(), &[token.as_bytes()], now);
    assert_eq!(
        (o.decision, o.rejected),
        (Decision::Deny, Some(Reject::WrongRoom))
    );
    assert_ne!(
        o.cookie,
        CookieAction::Keep,
        "a new place in the shop's own line"
    );
}

#[test]
fn an_open_room_takes_anyone_and_counts_refused_invitations() {
    let set = rooms("[[room]]\nname = \"shop\"\nallow_percentage = 100\n");
    let shop = set.get(0).unwrap();
    let ring = ring();
    let now = Timestamp::from_secs(1_000);
    let o = shop.decide_bringing(&ring, &alice(), &[], bringing("i1~junk"), now);
    assert_eq!(
        (o.decision, o.invitation),
        (Decision::Allow, Some(Err(Refusal::Malformed)))
    );
    let expired = code(&ring, "shop", 1);
    let later = Timestamp::from_secs(10_000);
    let o = shop.decide_bringing(&ring, &alice(), &[], bringing(&expired), later);
    assert_eq!(o.invitation, Some(Err(Refusal::Expired)));
    // A visitor holding a place needs no invitation: it is not looked at.
    let CookieAction::Set(token) = shop.decide(&ring, &bob(), &[], now).cookie else {
        panic!("a token")
    };
    let o = shop.decide_bringing(&ring, &bob(), &[token.as_bytes()], bringing("x"), now);
    assert_eq!(o.invitation, None);
}

#[test]
fn a_revoked_invitation_is_refused_and_its_holders_keep_their_places() {
    let ring = ring();
    let now = Timestamp::from_secs(1_000);
    let before =
        rooms("[[room]]\nname = \"presale\"\naccess = \"invite\"\nallow_percentage = 100\n");
    let shared = code(&ring, "presale", 10);
    let o = before
        .get(0)
        .unwrap()
        .decide_bringing(&ring, &alice(), &[], bringing(&shared), now);
    let CookieAction::Set(token) = o.cookie else {
        panic!("a place: {o:?}")
    };
    let id = crate::invite::id_of(&shared).unwrap();
    let after = rooms(&format!(
        "[[room]]\nname = \"presale\"\naccess = \"invite\"\nallow_percentage = 100\nrevoked_invitations = [\"{id:016x}\"]\n"
    ));
    let presale = after.get(0).unwrap();
    let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&shared), now);
    assert_eq!(
        (o.decision, o.invitation),
        (Decision::Uninvited, Some(Err(Refusal::Revoked)))
    );
    let o = presale.decide(&ring, &alice(), &[token.as_bytes()], now);
    assert_eq!(o.decision, Decision::Allow, "a holder keeps their place");
}

#[test]
fn a_full_memory_refuses_new_invitations_and_keeps_used_ones() {
    let set = rooms("[[room]]\nname = \"presale\"\naccess = \"invite\"\nmax_invitations = 1\n");
    let presale = set.get(0).unwrap();
    let ring = ring();
    let now = Timestamp::from_secs(1_000);
    let (a, b) = (code(&ring, "presale", 2), code(&ring, "presale", 2));
    let o = presale.decide_bringing(&ring, &alice(), &[], bringing(&a), now);
    assert_eq!(o.invitation, Some(Ok(())));
    let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&b), now);
    assert_eq!(o.invitation, Some(Err(Refusal::Full)));
    let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&a), now);
    assert_eq!(
        o.invitation,
        Some(Ok(())),
        "a remembered one still has a use"
    );
}

#[test]
fn rooms_of_a_set_of_several_take_only_their_own_places() {
    let ring = ring();
    let now = Timestamp::from_secs(1_000);
    let token = |room: &Room, uid: &Identity| match room.decide(&ring, uid, &[], now).cookie {
        CookieAction::Set(t) => t,
        other => panic!("no token: {other:?}"),
    };
    // One open room: the VCL's four fields.
    let one = rooms("[[room]]\nallow_percentage = 100\n");
    let vcl = token(one.get(0).unwrap(), &alice());
    assert!(!vcl.contains("rm="), "{vcl}");
    // Several: each names itself, and refuses another's.
    let set = rooms(
        "[[room]]\nname = \"site\"\nallow_percentage = 100\n\
         [[room]]\nname = \"checkout\"\npaths = [\"/checkout\"]\ncookie_name = \"c\"\nallow_percentage = 0\n",
    );
    let (site, checkout) = (set.get(0).unwrap(), set.get(1).unwrap());
    let easy = token(site, &alice());
    assert!(easy.contains("&rm=site&"), "{easy}");
    let o = checkout.decide(&ring, &alice(), &[easy.as_bytes()], now);
    assert_eq!(
        (o.decision, o.rejected),
        (Decision::Deny, Some(Reject::WrongRoom))
    );
    assert!(matches!(&o.cookie, CookieAction::Set(t) if t.contains("&rm=checkout&")));
    // A token naming no room (from before a second room was added) is still taken.
    let o = site.decide(&ring, &alice(), &[vcl.as_bytes()], now);
    assert_eq!((o.decision, o.rejected), (Decision::Allow, None));
    assert_eq!(
        site.holding(&ring, &alice(), &[easy.as_bytes()], now),
        Some(crate::token::Dec::Allow)
    );
    assert_eq!(
        checkout.holding(&ring, &alice(), &[easy.as_bytes()], now),
        None
    );
}

/// The one room of `toml`, under the operator overrides of `cell`.
fn overridden(toml: &str, cell: &Arc<RoomCell>) -> Room {
    let config = crate::config::Config::parse(
        &format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{toml}"),
        std::path::Path::new("/tmp/x.toml"),
        &crate::config::testing::Bare,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let room = config.rooms.into_iter().next().unwrap();
    Room::new(room, &store()).with_controls(cell.clone())
}

/// Room overrides with a pace override of `value` for `key`, set at `now` for `lasts`.
fn paced(key: PaceKey, value: f64, lasts: Option<u64>, now: Timestamp) -> RoomOverrides {
    let set = crate::controls::PaceSet {
        key,
        value,
        lasts: lasts.map(std::time::Duration::from_secs),
    };
    RoomOverrides {
        pace: Some(set.at(Stamp::default(), now)),
        ..RoomOverrides::default()
    }
}

/// Each visitor of `jar` asks once at `now` with the cookie it holds there; how many got in.
fn let_in(room: &Room, jar: &mut [Option<String>], now: Timestamp) -> usize {
    let ring = ring();
    let mut allowed = 0;
    for (i, cookie) in jar.iter_mut().enumerate() {
        let uid = Identity::of_ip(std::net::IpAddr::from([10, 9, (i >> 8) as u8, i as u8]), 64);
        let cookies: Vec<&[u8]> = cookie.as_deref().map(str::as_bytes).into_iter().collect();
        let o = room.decide(&ring, &uid, &cookies, now);
        if o.decision == Decision::Allow {
            allowed += 1;
        }
        match o.cookie {
            CookieAction::Set(v) => *cookie = Some(v.to_string()),
            CookieAction::Delete => *cookie = None,
            CookieAction::Keep => {}
        }
    }
    allowed
}

#[test]
fn a_capacity_room_admits_at_the_operators_pace_until_it_lapses() {
    const T0: u64 = 1_700_000_040; // the start of a minute
    let at = Timestamp::from_secs;
    let cell = Arc::new(RoomCell::default());
    let room = overridden(
        "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 2\n",
        &cell,
    );
    assert_eq!(room.effective_new_users_per_minute(at(T0)), Some(2));
    // Five a minute, for two minutes.
    cell.set(&paced(PaceKey::NewUsersPerMinute, 5.0, Some(120), at(T0)));
    assert_eq!(room.effective_new_users_per_minute(at(T0)), Some(5));
    let mut first = vec![None; 8];
    assert_eq!(let_in(&room, &mut first, at(T0)), 5);
    // Lapsed: the room's own pace is back, with nobody clearing anything.
    assert_eq!(room.effective_new_users_per_minute(at(T0 + 119)), Some(5));
    assert_eq!(room.effective_new_users_per_minute(at(T0 + 120)), Some(2));
    let later = at(T0 + 180);
    assert_eq!(room.figures(later).unwrap().free_slots, Some(2));
    let mut second = vec![None; 8];
    assert_eq!(let_in(&room, &mut second[..], later), 2);
}

#[test]
fn a_lottery_room_draws_at_the_operators_percentage_and_clearing_ends_it() {
    let now = Timestamp::from_secs(1_700_000_000);
    let cell = Arc::new(RoomCell::default());
    let room = overridden("[[room]]\nallow_percentage = 10\n", &cell);
    assert_eq!(room.effective_allow_percentage(now), 10.0);
    // Everyone in, until cleared.
    cell.set(&paced(PaceKey::AllowPercentage, 100.0, None, now));
    assert_eq!(room.effective_allow_percentage(now), 100.0);
    let mut jar = vec![None; 20];
    assert_eq!(let_in(&room, &mut jar, now), 20);
    let much_later = Timestamp::from_secs(1_700_000_000 + 30 * 86_400);
    assert_eq!(room.effective_allow_percentage(much_later), 100.0);
    // A fractional percentage, and nobody at 0 (the room still takes arrivals in line).
    cell.set(&paced(PaceKey::AllowPercentage, 12.5, Some(600), now));
    assert_eq!(room.effective_allow_percentage(now), 12.5);
    cell.set(&paced(PaceKey::AllowPercentage, 0.0, Some(600), now));
    assert_eq!(room.effective_allow_percentage(now), 0.0);
    let mut jar = vec![None; 20];
    assert_eq!(let_in(&room, &mut jar, now), 0);
    // `DELETE /rooms/<room>/overrides`: no overrides at all.
    cell.set(&RoomOverrides::default());
    assert_eq!(room.effective_allow_percentage(now), 10.0);
}

#[test]
fn the_operators_pace_beats_an_events() {
    let cell = Arc::new(RoomCell::default());
    let room = overridden(
        "[[room]]\nadmission = \"random\"\nnew_users_per_minute = 10\n\
         [[room.event]]\nname = \"launch\"\nstart = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T14:00:00Z\"\nnew_users_per_minute = 50\n",
        &cell,
    );
    let during = Timestamp::from_secs(1_796_119_200 + 600); // 2026-12-01T10:10:00Z
    assert_eq!(room.effective_new_users_per_minute(during), Some(50));
    cell.set(&paced(PaceKey::NewUsersPerMinute, 7.0, None, during));
    assert_eq!(room.effective_new_users_per_minute(during), Some(7));
}

#[test]
fn the_operators_pace_beats_the_autopilots() {
    let now = Timestamp::from_secs(1_700_000_040);
    let cell = Arc::new(RoomCell::default());
    let pilot = Arc::new(crate::autopilot::pilot::PilotCell::default());
    let room = overridden(
        "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 10\n\
         autopilot = true\nautopilot_min = 20\nautopilot_max = 100\n",
        &cell,
    )
    .with_pilot(pilot.clone());
    // The autopilot starts from the configured pace, clamped into its bounds.
    let autopilot = room.config.autopilot.unwrap();
    pilot.tick(&autopilot, room.pilot_now(now).unwrap(), now);
    assert_eq!(room.effective_new_users_per_minute(now), Some(20));
    cell.set(&paced(PaceKey::NewUsersPerMinute, 7.0, Some(60), now));
    assert_eq!(room.effective_new_users_per_minute(now), Some(7));
    // It takes over again when the override lapses.
    let later = Timestamp::from_secs(1_700_000_040 + 60);
    assert_eq!(room.effective_new_users_per_minute(later), Some(20));
}
