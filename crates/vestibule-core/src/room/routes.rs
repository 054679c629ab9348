//! Which room a request belongs to: the routing table of a snapshot's rooms, by host and the
//! longest matching path prefix.

use std::net::IpAddr;

use crate::config::HostPattern;
use crate::path::RequestPath;

use super::Room;

/// The room a request belongs to.
#[derive(Clone, Copy, Debug)]
pub struct Route<'a> {
    /// Position in the set (stable for one snapshot).
    pub index: usize,
    pub room: &'a Room,
    /// A bypass rule matched: forward untouched.
    pub bypass: bool,
}

#[derive(Debug)]
struct RouteEntry {
    host: Option<HostPattern>,
    prefix: String,
    room: usize,
}

/// Every room of a snapshot, with a routing table built at load.
#[derive(Debug, Default)]
pub struct RoomSet {
    rooms: Vec<Room>,
    routes: Vec<RouteEntry>,
    cookie_names: Vec<String>,
}

impl RoomSet {
    /// Rooms of a set of several sign their names into their tokens, so none takes another's
    /// place for its own (their tokens without a name, issued before a reload added a room,
    /// are still taken until they expire). A set of one keeps the VCL's four fields.
    pub fn new(mut rooms: Vec<Room>) -> RoomSet {
        if rooms.len() > 1 {
            for room in &mut rooms {
                room.bind_tokens();
            }
        }
        let mut routes = Vec::new();
        for (i, room) in rooms.iter().enumerate() {
            for prefix in &room.config.paths {
                if room.config.hosts.is_empty() {
                    routes.push(RouteEntry {
                        host: None,
                        prefix: prefix.clone(),
                        room: i,
                    });
                }
                for host in &room.config.hosts {
                    routes.push(RouteEntry {
                        host: Some(host.clone()),
                        prefix: prefix.clone(),
                        room: i,
                    });
                }
            }
        }
        // Longest prefix first; at equal length a room naming the host beats a catch-all;
        // then file order (the sort is stable).
        routes.sort_by_key(|r| (std::cmp::Reverse(r.prefix.len()), r.host.is_none()));
        // Solutions of `pow` rooms and JWT cookies never reach the origin either.
        let cookie_names = rooms
            .iter()
            .map(|r| r.config.cookie.name.clone())
            .chain(rooms.iter().filter_map(|r| r.solution_cookie.clone()))
            .chain(rooms.iter().filter_map(|r| r.jwt_cookie.clone()))
            .collect();
        RoomSet {
            rooms,
            routes,
            cookie_names,
        }
    }

    /// The route for a request. `host` is lowercase without port; `path` is normalised.
    pub fn route(&self, host: &str, path: &RequestPath, client_ip: IpAddr) -> Option<Route<'_>> {
        let normal = path.as_str();
        let entry = self.routes.iter().find(|r| {
            normal.starts_with(r.prefix.as_str()) && r.host.as_ref().is_none_or(|h| h.matches(host))
        })?;
        let room = &self.rooms[entry.room];
        // A bypass must hold however the origin reads the path.
        let bypass = room
            .config
            .bypass_paths
            .iter()
            .any(|p| path.is_under(p.as_str()))
            || room
                .config
                .bypass_cidrs
                .iter()
                .any(|n| n.contains(&client_ip));
        Some(Route {
            index: entry.room,
            room,
            bypass,
        })
    }

    pub fn get(&self, index: usize) -> Option<&Room> {
        self.rooms.get(index)
    }

    /// Every room cookie name: all of them are removed before the origin sees a request.
    pub fn cookie_names(&self) -> &[String] {
        &self.cookie_names
    }

    pub fn iter(&self) -> impl Iterator<Item = &Room> {
        self.rooms.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.rooms.is_empty()
    }
}
