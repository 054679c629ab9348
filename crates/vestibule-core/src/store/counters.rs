//! Exact counters, grouped by scope and kind.
//!
//! A capacity room reads its queue by scanning its counters of one kind (waiting users per tick
//! and arrival bucket, say). In one flat map, each scan visited every counter of the store:
//! every room's, and in a cluster every shared rate-limit key's, all under the store's lock.
//! Here each (scope, kind) has a map of its own, so a scan visits only what it reads, and a
//! lookup by parts (a shared window's key, looked up on every request under the rule) borrows
//! the scope's name instead of cloning its `Arc`, whose count is a line every thread writes.

use std::sync::Arc;

use hashbrown::{Equivalent, HashMap};

use super::{CounterKey, CounterKind};

#[derive(Debug, PartialEq, Eq, Hash)]
struct Group {
    scope: Arc<str>,
    kind: CounterKind,
}

/// A [`Group`] looked up without an `Arc`: the same fields, so the same hash.
#[derive(Hash)]
struct GroupRef<'a> {
    scope: &'a str,
    kind: CounterKind,
}

impl Equivalent<Group> for GroupRef<'_> {
    fn equivalent(&self, group: &Group) -> bool {
        *group.scope == *self.scope && group.kind == self.kind
    }
}

impl From<&GroupRef<'_>> for Group {
    fn from(g: &GroupRef<'_>) -> Group {
        Group {
            scope: Arc::from(g.scope),
            kind: g.kind,
        }
    }
}

type Slots<V> = HashMap<(u64, u64), V, ahash::RandomState>;

/// A counter met by [`Counters::iter`]: its value, and its key, made only when asked for (it
/// clones the scope's `Arc`).
pub struct Entry<'a, V> {
    group: &'a Group,
    slot: u64,
    id: u64,
    pub value: &'a V,
}

impl<V> Entry<'_, V> {
    pub fn key(&self) -> CounterKey {
        CounterKey {
            scope: self.group.scope.clone(),
            kind: self.group.kind,
            slot: self.slot,
            id: self.id,
        }
    }
}

/// The counters of one scope and kind.
pub struct CounterGroup<'a, V> {
    slots: &'a Slots<V>,
}

impl<'a, V> CounterGroup<'a, V> {
    pub fn get(&self, slot: u64, id: u64) -> Option<&'a V> {
        self.slots.get(&(slot, id))
    }
}

/// Counters by key. A group is never left empty, so an empty map has no groups.
#[derive(Debug)]
pub struct Counters<V> {
    groups: HashMap<Group, Slots<V>, ahash::RandomState>,
}

impl<V> Default for Counters<V> {
    fn default() -> Self {
        Counters {
            groups: HashMap::default(),
        }
    }
}

impl<V> Counters<V> {
    /// The counter of `scope` and `kind` at (`slot`, `id`).
    pub(crate) fn get_in(&self, scope: &str, kind: CounterKind, slot: u64, id: u64) -> Option<&V> {
        self.groups.get(&GroupRef { scope, kind })?.get(&(slot, id))
    }

    pub fn get(&self, key: &CounterKey) -> Option<&V> {
        self.get_in(&key.scope, key.kind, key.slot, key.id)
    }

    pub fn get_mut(&mut self, key: &CounterKey) -> Option<&mut V> {
        let scope = &*key.scope;
        self.groups
            .get_mut(&GroupRef {
                scope,
                kind: key.kind,
            })?
            .get_mut(&(key.slot, key.id))
    }

    /// The counter of `scope` and `kind` at (`slot`, `id`), made with `new` when missing (the
    /// scope's name is copied only for a new group).
    pub(crate) fn get_or_insert_with_in(
        &mut self,
        scope: &str,
        kind: CounterKind,
        slot: u64,
        id: u64,
        new: impl FnOnce() -> V,
    ) -> &mut V {
        self.groups
            .entry_ref(&GroupRef { scope, kind })
            .or_default()
            .entry((slot, id))
            .or_insert_with(new)
    }

    pub fn get_or_insert_with(&mut self, key: &CounterKey, new: impl FnOnce() -> V) -> &mut V {
        self.get_or_insert_with_in(&key.scope, key.kind, key.slot, key.id, new)
    }

    /// The counters of `scope` and `kind`, if it has any: looked up once for several reads.
    pub fn group(&self, scope: &str, kind: CounterKind) -> Option<CounterGroup<'_, V>> {
        self.groups
            .get(&GroupRef { scope, kind })
            .map(|slots| CounterGroup { slots })
    }

    /// The counters of `scope` and `kind`, as (slot, id, value), in no particular order.
    pub fn of(&self, scope: &str, kind: CounterKind) -> impl Iterator<Item = (u64, u64, &V)> {
        self.group(scope, kind)
            .into_iter()
            .flat_map(|g| g.slots.iter().map(|(&(slot, id), v)| (slot, id, v)))
    }

    /// Every counter.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_, V>> {
        self.groups.iter().flat_map(|(group, slots)| {
            slots.iter().map(move |(&(slot, id), value)| Entry {
                group,
                slot,
                id,
                value,
            })
        })
    }

    /// Keeps the counters `keep` says to keep (and drops groups left empty).
    pub fn retain(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        self.groups.retain(|_, slots| {
            slots.retain(|_, v| keep(v));
            !slots.is_empty()
        });
    }

    /// Every counter of `scope`, whatever its kind, as (kind, slot, value).
    pub fn of_scope<'a>(
        &'a mut self,
        scope: &'a str,
    ) -> impl Iterator<Item = (CounterKind, u64, &'a mut V)> + 'a {
        self.groups
            .iter_mut()
            .filter(move |(g, _)| &*g.scope == scope)
            .flat_map(|(g, slots)| {
                slots
                    .iter_mut()
                    .map(move |(&(slot, _), v)| (g.kind, slot, v))
            })
    }

    pub fn len(&self) -> usize {
        self.groups.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(scope: &str, kind: CounterKind, slot: u64, id: u64) -> CounterKey {
        CounterKey {
            scope: Arc::from(scope),
            kind,
            slot,
            id,
        }
    }

    #[test]
    fn a_counter_is_found_by_its_key_and_by_its_parts() {
        let mut c = Counters::default();
        *c.get_or_insert_with(&key("a", CounterKind::Active, 1, 2), || 0) += 5;
        *c.get_or_insert_with_in("a", CounterKind::Active, 1, 2, || 100) += 1;
        assert_eq!(c.get(&key("a", CounterKind::Active, 1, 2)), Some(&6));
        assert_eq!(c.get_in("a", CounterKind::Active, 1, 2), Some(&6));
        assert_eq!(
            c.get_in("a", CounterKind::Waiting, 1, 2),
            None,
            "another kind"
        );
        assert_eq!(
            c.get_in("b", CounterKind::Active, 1, 2),
            None,
            "another scope"
        );
        assert_eq!(
            c.get_in("a", CounterKind::Active, 2, 1),
            None,
            "slot and id not swapped"
        );
        let group = c.group("a", CounterKind::Active).expect("a group");
        assert_eq!((group.get(1, 2), group.get(2, 1)), (Some(&6), None));
        assert!(c.group("a", CounterKind::Waiting).is_none());
        *c.get_mut(&key("a", CounterKind::Active, 1, 2)).unwrap() -= 6;
        assert_eq!(c.get_in("a", CounterKind::Active, 1, 2), Some(&0));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_scan_reads_one_scope_and_kind_only() {
        let mut c = Counters::default();
        for (scope, kind, slot, id, v) in [
            ("shop", CounterKind::Waiting, 1, 7, 10),
            ("shop", CounterKind::Waiting, 2, 7, 20),
            ("shop", CounterKind::Arrived, 1, 7, 30),
            ("shop2", CounterKind::Waiting, 1, 7, 40),
            ("sho", CounterKind::Waiting, 1, 7, 50),
        ] {
            c.get_or_insert_with(&key(scope, kind, slot, id), || v);
        }
        let mut waiting: Vec<_> = c
            .of("shop", CounterKind::Waiting)
            .map(|(s, i, &v)| (s, i, v))
            .collect();
        waiting.sort_unstable();
        assert_eq!(waiting, [(1, 7, 10), (2, 7, 20)]);
        assert_eq!(c.of("nobody", CounterKind::Waiting).count(), 0);
        assert_eq!(c.len(), 5);
        let mut all: Vec<_> = c.iter().map(|e| (e.key(), *e.value)).collect();
        all.sort();
        assert_eq!(all.len(), 5);
        assert_eq!(all[0], (key("sho", CounterKind::Waiting, 1, 7), 50));
    }

    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Add(usize, u8, u64, u64, i64),
        Retain(i64),
    }

    const SCOPES: [&str; 3] = ["a", "ab", "b"];
    const KINDS: [CounterKind; 3] = [
        CounterKind::Active,
        CounterKind::Waiting,
        CounterKind::Window,
    ];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0..3usize, 0..3u8, 0..4u64, 0..4u64, -5..5i64)
                .prop_map(|(s, k, slot, id, d)| Op::Add(s, k, slot, id, d)),
            1 => (-5..5i64).prop_map(Op::Retain),
        ]
    }

    proptest! {
        /// Whatever is added and dropped, the grouped map reads as one flat map of keys would.
        #[test]
        fn reads_as_a_flat_map(ops in proptest::collection::vec(op(), 0..200)) {
            let mut c = Counters::default();
            let mut model = std::collections::BTreeMap::new();
            for op in ops {
                match op {
                    Op::Add(s, k, slot, id, d) => {
                        let key = key(SCOPES[s], KINDS[k as usize], slot, id);
                        *c.get_or_insert_with(&key, || 0) += d;
                        *model.entry(key).or_insert(0) += d;
                    }
                    Op::Retain(above) => {
                        c.retain(|v| *v > above);
                        model.retain(|_, v| *v > above);
                    }
                }
            }
            prop_assert_eq!(c.len(), model.len());
            prop_assert_eq!(c.is_empty(), model.is_empty());
            let mut all: Vec<_> = c.iter().map(|e| (e.key(), *e.value)).collect();
            all.sort();
            prop_assert_eq!(&all, &model.iter().map(|(k, &v)| (k.clone(), v)).collect::<Vec<_>>());
            for scope in SCOPES {
                for kind in KINDS {
                    let mut scan: Vec<_> = c.of(scope, kind).map(|(s, i, &v)| (s, i, v)).collect();
                    scan.sort_unstable();
                    let want: Vec<_> = model
                        .iter()
                        .filter(|(k, _)| &*k.scope == scope && k.kind == kind)
                        .map(|(k, &v)| (k.slot, k.id, v))
                        .collect();
                    prop_assert_eq!(&scan, &want);
                    for slot in 0..4 {
                        for id in 0..4 {
                            let k = key(scope, kind, slot, id);
                            prop_assert_eq!(c.get(&k), model.get(&k));
                            prop_assert_eq!(
                                c.group(scope, kind).and_then(|g| g.get(slot, id)),
                                model.get(&k)
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn retain_drops_counters_and_empty_groups() {
        let mut c = Counters::default();
        c.get_or_insert_with(&key("a", CounterKind::Active, 1, 0), || 1);
        c.get_or_insert_with(&key("a", CounterKind::Active, 2, 0), || 2);
        c.get_or_insert_with(&key("b", CounterKind::Active, 1, 0), || 3);
        c.retain(|v| *v != 3);
        assert_eq!(c.len(), 2);
        assert_eq!(c.of("b", CounterKind::Active).count(), 0);
        c.retain(|v| *v > 1);
        assert_eq!(c.len(), 1);
        c.retain(|_| false);
        assert!(c.is_empty(), "no group is left empty");
        assert_eq!(c.len(), 0);
    }
}
