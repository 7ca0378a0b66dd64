//! The ACL's command ids: one per command-table row (its row number), then one per
//! subcommand of each container row, as Redis gives every subcommand an id of its own.
//! A user's allowed commands are a bitmap over these ids ([`Bits`]); this module names
//! them (`config|get`), finds them as `ACL SETUSER` and the check do, and visits them
//! in the one order every pass over all commands uses.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::LazyLock;

use super::categories::{COMMANDS, Categories, Category, Entry, KeyAccess, NO_AUTH};
use crate::table::TABLE;

/// One command id's facts.
#[derive(Debug)]
pub(super) struct Item {
    /// Lowercase; `container|sub` for a subcommand (Redis's `fullname`).
    pub name: String,
    pub categories: Categories,
    /// Key access per Redis key spec (see [`Entry::key_access`]); `None` when the
    /// category table has no row for it (a test keeps that from happening).
    pub entry: Option<&'static Entry>,
    /// Redis's `NO_AUTH`: the command check is skipped.
    pub no_auth: bool,
    /// The container's id, for a subcommand.
    pub parent: Option<usize>,
    /// A container's subcommand ids.
    pub subs: Range<usize>,
}

impl Item {
    /// What this command's `nth` key needs, if the category table says.
    pub fn key_access(&self, nth: usize) -> Option<KeyAccess> {
        self.entry.and_then(|e| e.key_access(nth))
    }
}

/// Every command id, built once from [`TABLE`] and [`COMMANDS`].
#[derive(Debug)]
pub(super) struct Universe {
    items: Vec<Item>,
    by_name: HashMap<String, usize>,
    /// Ids in visiting order: each row, then its subcommands.
    order: Vec<usize>,
}

pub(super) static UNIVERSE: LazyLock<Universe> = LazyLock::new(Universe::build);

impl Universe {
    fn build() -> Universe {
        let entries: HashMap<&str, &'static Entry> = COMMANDS.iter().map(|e| (e.name, e)).collect();
        let item = |name: String, parent: Option<usize>| {
            let entry = entries.get(name.as_str()).copied();
            Item {
                categories: entry.map_or(0, |e| e.categories),
                no_auth: NO_AUTH.contains(&name.as_str()),
                entry,
                parent,
                subs: 0..0,
                name,
            }
        };
        let mut items: Vec<Item> = TABLE
            .iter()
            .map(|spec| item(spec.name.to_string(), None))
            .collect();
        let rows = items.len();
        let mut order = Vec::with_capacity(COMMANDS.len() + rows);
        for row in 0..rows {
            order.push(row);
            let prefix = format!("{}|", TABLE[row].name);
            let start = items.len();
            for e in COMMANDS.iter().filter(|e| e.name.starts_with(&prefix)) {
                order.push(items.len());
                items.push(item(e.name.to_string(), Some(row)));
            }
            items[row].subs = start..items.len();
        }
        let by_name = items
            .iter()
            .enumerate()
            .map(|(id, it)| (it.name.clone(), id))
            .collect();
        Universe {
            items,
            by_name,
            order,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn item(&self, id: usize) -> &Item {
        &self.items[id]
    }

    /// Ids in the order Redis's passes over its command table take here: each row in
    /// table order, then its subcommands.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The id of a lowercase full name.
    pub fn id(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The id `ACL SETUSER` means by `name` (Redis's `ACLLookupCommand`):
    /// case-insensitive, `container|sub` for a subcommand, at most one `|`, and a `|`
    /// only after a container.
    pub fn lookup(&self, name: &[u8]) -> Option<usize> {
        // Only rows and `container|sub` have ids, so a map hit is Redis's strict lookup:
        // `get|x`, `config|get|x` and `|get` find nothing.
        let lower = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        self.id(&lower)
    }

    /// The id a call runs: a container's subcommand by its first argument, else the row.
    /// A subcommand the table does not know is checked as the container itself.
    pub fn resolve(&self, row: usize, args: &[bytes::Bytes]) -> usize {
        let item = &self.items[row];
        if item.subs.is_empty() {
            return row;
        }
        let Some(sub) = args.get(1) else {
            return row;
        };
        self.items[item.subs.clone()]
            .iter()
            .position(|s| {
                s.name
                    .split_once('|')
                    .is_some_and(|(_, n)| n.as_bytes().eq_ignore_ascii_case(sub))
            })
            .map_or(row, |i| item.subs.start + i)
    }

    /// The ids in `category`.
    pub fn in_category(&self, category: Category) -> impl Iterator<Item = usize> + '_ {
        self.order
            .iter()
            .copied()
            .filter(move |&id| self.items[id].categories & category.bit() != 0)
    }
}

/// A bitmap over command ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub fn none() -> Bits {
        Bits(vec![0; UNIVERSE.len().div_ceil(64)])
    }

    pub fn all() -> Bits {
        let mut bits = Bits::none();
        for id in 0..UNIVERSE.len() {
            bits.set(id, true);
        }
        bits
    }

    pub fn get(&self, id: usize) -> bool {
        self.0
            .get(id / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    pub fn set(&mut self, id: usize, on: bool) {
        if let Some(w) = self.0.get_mut(id / 64) {
            if on {
                *w |= 1 << (id % 64);
            } else {
                *w &= !(1 << (id % 64));
            }
        }
    }
}
