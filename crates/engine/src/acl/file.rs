//! The ACL file (`ACL SAVE` writes it, `ACL LOAD` reads it: one `user <name> <rules>`
//! line per user, Redis 7.0's `ACLSaveToFile` / `ACLLoadFromFile` with their error
//! texts), and `ACL GENPASS`.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use rand::Rng;

use super::user::{RuleError, User, has_spaces, merge_selectors};
use super::{AclError, Users};

/// `ACL GENPASS`'s largest size.
const GENPASS_MAX_BITS: i64 = 4096;

/// `ACL GENPASS [bits]`: `bits` (default 256) of a CSPRNG's output as lowercase hex,
/// rounded up to whole hex digits.
pub fn genpass(bits: Option<&[u8]>) -> Result<String, AclError> {
    let bits = match bits {
        None => 256,
        Some(b) => crate::parse_i64(b).ok_or(AclError::NotInteger)?,
    };
    if !(1..=GENPASS_MAX_BITS).contains(&bits) {
        return Err(AclError::GenpassRange);
    }
    let chars = usize::try_from((bits + 3) / 4).map_err(|_| AclError::GenpassRange)?;
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    // The thread RNG is a CSPRNG (ChaCha) seeded from the OS.
    rand::rng().fill_bytes(&mut bytes);
    let mut hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(chars);
    Ok(hex)
}

impl Users {
    /// The ACL file's text: every user's line, in name order, each ending in `\n`.
    pub fn to_acl_file(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for user in self.users() {
            out.extend_from_slice(&user.acl_list_line());
            out.push(b'\n');
        }
        out
    }

    /// Reads an ACL file (`ACLLoadFromFile`): blank lines are skipped, every other line
    /// must be `user <name> <rules...>` (split on single spaces); a file without a
    /// `default` user gets the usual one. Every line is tried, and the error lists every
    /// problem found, `filename:line: ...`, as Redis's does; nothing is loaded then.
    pub fn from_acl_file(text: &[u8], filename: &str) -> Result<Users, AclError> {
        let mut users: BTreeMap<Bytes, Arc<User>> = BTreeMap::new();
        let mut errors = String::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            let line = trim(line, b" \t\r\n");
            if line.is_empty() {
                continue;
            }
            let argv: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let (Some(b"user"), Some(&name)) = (argv.first().map(|a| &a[..]), argv.get(1)) else {
                errors.push_str(&format!(
                    "{filename}:{n} should start with user keyword followed by the username. "
                ));
                continue;
            };
            if has_spaces(name) {
                errors.push_str(&format!(
                    "'{filename}:{n}: username '{}' contains invalid characters. ",
                    String::from_utf8_lossy(name)
                ));
                continue;
            }
            let name = Bytes::copy_from_slice(name);
            if users.contains_key(&name) {
                errors.push_str(&format!(
                    "WARNING: Duplicate user '{}' found on line {n}. ",
                    String::from_utf8_lossy(&name)
                ));
                continue;
            }
            let mut user = User::new(name.clone());
            let rules = merge_selectors(argv.get(2..).unwrap_or_default()).unwrap_or_else(|_| {
                errors.push_str(&format!(
                    "{filename}:{n}: Unmatched parenthesis in selector definition."
                ));
                Vec::new()
            });
            let mut syntax_error = false;
            for rule in &rules {
                let rule = trim(rule, b"\t\r\n");
                match user.apply(rule) {
                    Ok(()) => {}
                    // A missing command is named: it cannot be a secret.
                    Err(e @ RuleError::UnknownName) => errors.push_str(&format!(
                        "{filename}:{n}: Error in applying operation '{}': {e}. ",
                        String::from_utf8_lossy(rule)
                    )),
                    // Other errors only once a line: later ones may follow from it.
                    Err(e) if !syntax_error => {
                        errors.push_str(&format!("{filename}:{n}: {e}. "));
                        syntax_error = true;
                    }
                    Err(_) => {}
                }
            }
            users.insert(name, Arc::new(user));
        }
        if !errors.is_empty() {
            errors.push_str(
                "WARNING: ACL errors detected, no change to the previously active ACL rules \
                 was performed",
            );
            return Err(AclError::Load(errors));
        }
        Ok(Users::from_map(users))
    }
}

/// `sdstrim`: `set`'s bytes off both ends.
fn trim<'a>(s: &'a [u8], set: &[u8]) -> &'a [u8] {
    let start = s.iter().position(|b| !set.contains(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !set.contains(b))
        .map_or(start, |e| e + 1);
    s.get(start..end).unwrap_or_default()
}
