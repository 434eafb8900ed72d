//! Factories by name, as a config key names them: the one map behind every
//! registry of things one can add to (sync rules, group schedules, and the
//! CTR crate's models and row optimizers).

use crate::{Error, Result};
use std::collections::BTreeMap;
use std::fmt;

/// Factories `F` by name, for the config key `key`; a name it does not know
/// is an error naming the key and the names it knows.
#[derive(Clone)]
pub struct Named<F> {
    key: &'static str,
    what: &'static str,
    /// Names the key also takes that are made elsewhere (built-in schedules).
    elsewhere: Vec<&'static str>,
    by_name: BTreeMap<String, F>,
}

impl<F> Named<F> {
    /// None yet, for `key`, whose values are `what`s ("sync rule").
    pub fn new(key: &'static str, what: &'static str) -> Self {
        Self {
            key,
            what,
            elsewhere: Vec::new(),
            by_name: BTreeMap::new(),
        }
    }

    /// The same, the key also taking `names` made elsewhere (said among
    /// the known names of an error).
    pub fn also_taking(mut self, names: impl IntoIterator<Item = &'static str>) -> Self {
        self.elsewhere = names.into_iter().collect();
        self
    }

    /// Adds `make` as `name` (in place of one of that name).
    pub fn insert(&mut self, name: &str, make: F) {
        self.by_name.insert(name.to_string(), make);
    }

    /// Whether one is called `name`.
    pub fn knows(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The factory called `name`.
    ///
    /// # Errors
    ///
    /// An unknown name: [`Error::Config`] naming the key and the known names.
    pub fn get(&self, name: &str) -> Result<&F> {
        self.by_name.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.elsewhere.clone();
            known.extend(self.by_name.keys().map(String::as_str));
            Error::Config {
                key: self.key.into(),
                reason: format!(
                    "unknown {} {name:?}; known: {}",
                    self.what,
                    known.join(", ")
                ),
            }
        })
    }
}

impl<F> fmt::Debug for Named<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_name.keys()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_is_an_error_naming_the_key_and_every_known_name() {
        let mut named = Named::new("sync.schedule", "schedule").also_taking(["global"]);
        named.insert("ring", 1);
        named.insert("star", 2);
        assert_eq!(named.get("ring").unwrap(), &1);
        let e = named.get("rign").unwrap_err().to_string();
        assert!(e.contains("sync.schedule") && e.contains("\"rign\""), "{e}");
        assert!(e.contains("known: global, ring, star"), "{e}");
    }
}
