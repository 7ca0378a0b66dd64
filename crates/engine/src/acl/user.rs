//! A user, and Redis 7.0's `ACL SETUSER` grammar (`ACLSetUser` and `ACLSetSelector` in
//! `src/acl.c`): flags, passwords (kept as SHA-256 hex), and the permissions the rules
//! compile to — an allowed-bitmap over command ids with first-args, key patterns with
//! read/write flags, channel patterns.
//!
//! Selectors (`(...)`) are refused; a user is Redis's root selector alone, so
//! `clearselectors` has nothing to clear and is accepted.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::AclError;
use super::categories::{Category, KEY_R, KEY_RW, KEY_W, KeyAccess};
use super::commands::{Bits, UNIVERSE};

/// Why one rule was refused: Redis's `ACLSetUserStringError` texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// `EINVAL`.
    Syntax,
    /// `ENOENT`: no such command, subcommand or category.
    UnknownName,
    /// `EEXIST`.
    KeyAfterAllKeys,
    /// `EISDIR`.
    ChannelAfterAllChannels,
    /// `ENODEV`.
    NoSuchPassword,
    /// `EBADMSG`.
    BadHash,
    /// `ECHILD`.
    FirstArgOfSubcommand,
    /// A selector `(...)`: not built in DMC.
    Selectors,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleError::Syntax => "Syntax error",
            RuleError::UnknownName => "Unknown command or category name in ACL",
            RuleError::KeyAfterAllKeys => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and \
                 does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::ChannelAfterAllChannels => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid \
                 and does not have any effect. Try 'resetchannels' to start with an empty list \
                 of channels"
            }
            RuleError::NoSuchPassword => {
                "The password you are trying to remove from the user does not exist"
            }
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase \
                 hexadecimal characters"
            }
            RuleError::FirstArgOfSubcommand => {
                "Allowing first-arg of a subcommand is not supported"
            }
            RuleError::Selectors => "Selectors are not supported",
        })
    }
}

/// A key pattern and what it grants: read (`%R~`), write (`%W~`) or both (`~`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyPattern {
    pub pattern: Bytes,
    pub access: KeyAccess,
}

/// What a user may run and touch (Redis's root selector).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Perms {
    /// `SELECTOR_FLAG_ALLCOMMANDS`: set by `+@all`, cleared by any command taken away.
    pub all_commands: bool,
    /// The reserved bit `+@all` sets and only `-@all` clears: the user was built from
    /// `+@all` (and is described starting from it).
    pub future: bool,
    pub allowed: Bits,
    /// First arguments allowed of a command whose bit is clear (`+select|0`), by id.
    pub first_args: BTreeMap<usize, Vec<Bytes>>,
    pub all_keys: bool,
    pub keys: Vec<KeyPattern>,
    pub all_channels: bool,
    pub channels: Vec<Bytes>,
}

impl Perms {
    /// Nothing allowed (`acl-pubsub-default` is Redis 7.0's `resetchannels`).
    pub fn none() -> Perms {
        Perms {
            all_commands: false,
            future: false,
            allowed: Bits::none(),
            first_args: BTreeMap::new(),
            all_keys: false,
            keys: Vec::new(),
            all_channels: false,
            channels: Vec::new(),
        }
    }

    /// `ACLSetSelectorCommandBit`.
    fn set_bit(&mut self, id: usize, on: bool) {
        self.allowed.set(id, on);
        if !on {
            self.all_commands = false;
        }
    }

    /// `ACLChangeSelectorPerm`: one command, and a container's subcommands with it.
    pub fn change(&mut self, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.first_args.remove(&id);
        for sub in UNIVERSE.item(id).subs.clone() {
            self.set_bit(sub, allow);
        }
    }

    /// `+@category` / `-@category`.
    pub fn set_category(&mut self, category: Category, allow: bool) {
        for id in UNIVERSE.in_category(category) {
            self.change(id, allow);
        }
    }

    /// `+@all` / `-@all`.
    pub fn set_all(&mut self, allow: bool) {
        self.allowed = if allow { Bits::all() } else { Bits::none() };
        self.all_commands = allow;
        self.future = allow;
        self.first_args.clear();
    }

    /// `ACLAddAllowedFirstArg`: kept once, compared case-insensitively.
    fn add_first_arg(&mut self, id: usize, arg: &[u8]) {
        let args = self.first_args.entry(id).or_default();
        if !args.iter().any(|a| a.eq_ignore_ascii_case(arg)) {
            args.push(Bytes::copy_from_slice(arg));
        }
    }

    /// One selector rule (`ACLSetSelector`).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |word: &str| op.eq_ignore_ascii_case(word.as_bytes());
        if is("allkeys") || op == b"~*" {
            self.all_keys = true;
            self.keys.clear();
        } else if is("resetkeys") {
            self.all_keys = false;
            self.keys.clear();
        } else if is("allchannels") || op == b"&*" {
            self.all_channels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all(false);
        } else {
            match op {
                [b'~' | b'%', ..] => self.add_key_pattern(op)?,
                [b'&', pattern @ ..] => self.add_channel(pattern)?,
                [b'+' | b'-', b'@', category @ ..] => {
                    let category = Category::from_name(category).ok_or(RuleError::UnknownName)?;
                    self.set_category(category, op[0] == b'+');
                }
                [b'+', name @ ..] => self.allow_command(name)?,
                [b'-', name @ ..] => {
                    let id = UNIVERSE.lookup(name).ok_or(RuleError::UnknownName)?;
                    self.change(id, false);
                }
                _ => return Err(RuleError::Syntax),
            }
        }
        Ok(())
    }

    /// `~pattern`, `%R~pattern`, `%W~pattern`, `%RW~pattern`: a pattern given twice
    /// keeps its place and gains the new flags.
    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::KeyAfterAllKeys);
        }
        let (access, pattern) = if op.first() == Some(&b'%') {
            let mut access = 0;
            let mut at = 1;
            while let Some(&c) = op.get(at) {
                at += 1;
                match c.to_ascii_uppercase() {
                    b'R' if access & KEY_R == 0 => access |= KEY_R,
                    b'W' if access & KEY_W == 0 => access |= KEY_W,
                    // redis-server 7.0.15 refuses `%~x` (no flag before the `~`).
                    b'~' if access != 0 => break,
                    _ => return Err(RuleError::Syntax),
                }
            }
            if access == 0 {
                return Err(RuleError::Syntax);
            }
            (access, op.get(at..).unwrap_or_default())
        } else {
            (KEY_RW, op.get(1..).unwrap_or_default())
        };
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.keys.iter_mut().find(|k| k.pattern == pattern) {
            Some(existing) => existing.access |= access,
            None => self.keys.push(KeyPattern {
                pattern: Bytes::copy_from_slice(pattern),
                access,
            }),
        }
        self.all_keys = false;
        Ok(())
    }

    fn add_channel(&mut self, pattern: &[u8]) -> Result<(), RuleError> {
        if self.all_channels {
            return Err(RuleError::ChannelAfterAllChannels);
        }
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        if !self.channels.iter().any(|c| c == pattern) {
            self.channels.push(Bytes::copy_from_slice(pattern));
        }
        self.all_channels = false;
        Ok(())
    }

    /// `+command`, `+container|sub`, or `+command|first-arg` for a command without
    /// subcommands (Redis's deprecated first-arg form, `+select|0`).
    fn allow_command(&mut self, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let id = UNIVERSE.lookup(name).ok_or(RuleError::UnknownName)?;
            self.change(id, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let base = UNIVERSE.lookup(base).ok_or(RuleError::UnknownName)?;
        let item = UNIVERSE.item(base);
        if item.parent.is_some() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if item.subs.is_empty() {
            self.add_first_arg(base, sub);
        } else {
            let id = UNIVERSE.lookup(name).ok_or(RuleError::UnknownName)?;
            self.change(id, true);
        }
        Ok(())
    }
}

/// Redis's `ACLStringHasSpaces`: whitespace (C's `isspace`) or NUL.
pub(super) fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0))
}

/// SHA-256 of a password, as lowercase hex (`ACLHashPassword`).
pub fn hash_password(password: &[u8]) -> String {
    let digest = Sha256::digest(password);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `ACLCheckPasswordHash`: 64 lowercase hex digits.
fn valid_hash(hash: &[u8]) -> bool {
    hash.len() == 64 && hash.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether two equally long strings are equal, in time independent of where they
/// differ (`time_independent_strcmp`).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A user: flags, passwords and permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    name: Bytes,
    enabled: bool,
    nopass: bool,
    /// `sanitize-payload` (`Some(true)`), `skip-sanitize-payload` (`Some(false)`), or
    /// neither (a user never given either: `ACL SETUSER x` alone).
    sanitize_payload: Option<bool>,
    passwords: Vec<String>,
    pub(super) perms: Perms,
}

impl User {
    /// A new user as `ACL SETUSER name` creates it: off, no password, nothing allowed.
    pub fn new(name: impl Into<Bytes>) -> User {
        User {
            name: name.into(),
            enabled: false,
            nopass: false,
            sanitize_payload: None,
            passwords: Vec::new(),
            perms: Perms::none(),
        }
    }

    /// The `default` user: `on nopass ~* &* +@all`, or with `requirepass`'s hash
    /// instead of `nopass`.
    pub fn default_user(requirepass: Option<&[u8]>) -> User {
        let mut user = User::new(Bytes::from_static(b"default"));
        user.perms.set_all(true);
        user.perms.all_keys = true;
        user.perms.all_channels = true;
        user.enabled = true;
        user.set_requirepass(requirepass);
        user
    }

    /// `requirepass`: the only password, or `nopass` when none
    /// (`ACLUpdateDefaultUserPassword`).
    pub fn set_requirepass(&mut self, password: Option<&[u8]>) {
        self.passwords.clear();
        self.nopass = password.is_none();
        if let Some(p) = password {
            self.passwords.push(hash_password(p));
        }
    }

    pub fn name(&self) -> &Bytes {
        &self.name
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn nopass(&self) -> bool {
        self.nopass
    }

    /// The password hashes (SHA-256 hex), in the order they were added.
    pub fn password_hashes(&self) -> &[String] {
        &self.passwords
    }

    /// Whether `password` is one of the user's (any is, for `nopass`). Whether the
    /// user is enabled is the caller's question (`ACLCheckUserCredentials` asks it first).
    pub fn check_password(&self, password: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let hashed = hash_password(password);
        // Every hash is compared, so the time taken says nothing of which matched.
        self.passwords.iter().fold(false, |ok, p| {
            same_secret(p.as_bytes(), hashed.as_bytes()) | ok
        })
    }

    /// The user's flags as `ACL GETUSER` and `ACL LIST` name them, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// One rule (`ACLSetUser`). Not atomic over several rules: see
    /// [`User::apply_rules`].
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |word: &str| op.eq_ignore_ascii_case(word.as_bytes());
        if op.is_empty() {
            // Redis: an empty rule does nothing.
        } else if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize_payload = Some(false);
        } else if is("sanitize-payload") {
            self.sanitize_payload = Some(true);
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if let [kind @ (b'>' | b'#' | b'<' | b'!'), rest @ ..] = op {
            let hash = if matches!(kind, b'>' | b'<') {
                hash_password(rest)
            } else if valid_hash(rest) {
                String::from_utf8_lossy(rest).into_owned()
            } else {
                return Err(RuleError::BadHash);
            };
            if matches!(kind, b'>' | b'#') {
                if !self.passwords.contains(&hash) {
                    self.passwords.push(hash);
                }
                self.nopass = false;
            } else {
                let at = self.passwords.iter().position(|p| *p == hash);
                self.passwords.remove(at.ok_or(RuleError::NoSuchPassword)?);
            }
        } else if op.first() == Some(&b'(') && op.last() == Some(&b')') {
            return Err(RuleError::Selectors);
        } else if is("clearselectors") {
            // A user here is its root selector alone: there is nothing to clear.
        } else if is("reset") {
            // resetpass resetkeys resetchannels off sanitize-payload clearselectors -@all
            self.nopass = false;
            self.passwords.clear();
            self.perms = Perms::none();
            self.enabled = false;
            self.sanitize_payload = Some(true);
        } else {
            self.perms.apply(op)?;
        }
        Ok(())
    }

    /// `ACL SETUSER`'s rules, all or none (`ACLStringSetUser`): a selector spread over
    /// several arguments is joined first, then every rule is applied to a copy, which
    /// replaces the user only if none failed.
    pub fn apply_rules<R: AsRef<[u8]>>(&mut self, rules: &[R]) -> Result<(), AclError> {
        let rules = merge_selectors(rules).map_err(|at| {
            AclError::UnmatchedParenthesis(String::from_utf8_lossy(at).into_owned())
        })?;
        let mut staged = self.clone();
        for op in &rules {
            staged.apply(op).map_err(|reason| AclError::Modifier {
                op: String::from_utf8_lossy(op).into_owned(),
                reason,
            })?;
        }
        *self = staged;
        Ok(())
    }
}

/// `ACLMergeSelectorArguments`: a rule that starts with `(` but does not end with `)`
/// opens a selector that later rules join (space-separated) until one ends with `)`.
/// An unclosed selector is an error naming the rule that opened it.
pub(super) fn merge_selectors<R: AsRef<[u8]>>(rules: &[R]) -> Result<Vec<Vec<u8>>, &[u8]> {
    let mut merged = Vec::with_capacity(rules.len());
    let mut open: Option<(&[u8], Vec<u8>)> = None;
    for rule in rules {
        let op = rule.as_ref();
        // Redis tests for an opening rule first: one inside an open selector restarts it.
        if op.first() == Some(&b'(') && op.last() != Some(&b')') {
            open = Some((op, op.to_vec()));
        } else if let Some((_, selector)) = open.as_mut() {
            selector.push(b' ');
            selector.extend_from_slice(op);
            if op.last() == Some(&b')') {
                merged.extend(open.take().map(|(_, s)| s));
            }
        } else {
            merged.push(op.to_vec());
        }
    }
    match open {
        Some((start, _)) => Err(start),
        None => Ok(merged),
    }
}
