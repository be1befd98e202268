//! The tables of keys: every key of every section written once, with its type, default, range
//! and doc, in one [`keys!`] entry next to the field it fills. The table drives reading the file
//! (unknown keys, wrong types, ranges, the messages of `courtesy check`), the built-in defaults,
//! the reference page in `docs/configuration.md` and the comments of `config/courtesy.toml`
//! (`reference`, checked by a test against both files).
//!
//! A table never holds runtime state and never checks one key against another: those checks
//! (`min_rate` not above `max_rate`, a listener beyond loopback needs `allow_clients`) stay with
//! the section's validator.

pub(crate) mod host;
pub(crate) mod kinds;
pub(crate) mod process;

use serde::de::DeserializeOwned;
use toml::de::{DeValue, ValueDeserializer};
use toml::Spanned;

use super::problems::Validator;

/// One key of a section, as the file spells it, for the struct `T` it fills.
pub struct Key<T: 'static> {
    /// The key as written in the file.
    pub name: &'static str,
    /// Its doc comment, a line each: the first paragraph is the one-line doc of the reference
    /// page, the whole is the comment above the key in `config/courtesy.toml`.
    pub doc: &'static [&'static str],
    /// What it takes, as the reference page says it: `seconds, 0 to 86400`.
    pub takes: fn() -> String,
    /// Its value in `T::default()`, as TOML; `None` when it is unset by default.
    pub shown: fn(&T) -> Option<toml::Value>,
    /// A value to show, commented out, for a key that is unset by default.
    pub example: Option<&'static str>,
    /// Whether the value is secret (a token, a URL that may hold a password): never repeated in
    /// a message.
    pub secret: fn() -> bool,
    /// Reads the value into `T`, reporting what is wrong with it.
    pub(crate) read: for<'d, 's, 'v> fn(&Spanned<DeValue<'d>>, &mut Say<'s, 'v>, &mut T),
}

impl<T> Key<T> {
    /// The first paragraph of the doc, on one line.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for line in self.doc {
            let line = line.trim();
            if line.is_empty() {
                break;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(line);
        }
        out
    }

    /// The default as the file writes it (`1.0`, `"reject"`, `[500, 502]`), if it has one.
    pub fn default_text(&self, defaults: &T) -> Option<String> {
        (self.shown)(defaults).map(|v| v.to_string())
    }
}

/// A group of keys with its doc comment, a line each (a section, or a concern within one).
pub type Group<T> = (&'static [&'static str], &'static [Key<T>]);

/// Where a key's problems go: the validator, and how the section is named in messages.
pub(crate) struct Say<'s, 'v> {
    /// The validator collecting the messages.
    pub(crate) v: &'s mut Validator<'v>,
    /// The section as value messages name it: `[defaults]`, `host rule 2 (match = "a.test")`.
    pub(crate) label: &'s str,
    /// The section as messages about a key's type name it: `[defaults] `, `[[host]] 2: `.
    pub(crate) path: &'s str,
}

impl Say<'_, '_> {
    /// Reports `message` (whole, after `file:line: `) at byte `at` of the file.
    pub(crate) fn error(&mut self, at: usize, message: &str) {
        self.v.error(at, message);
    }

    /// The value as the Rust type `F`, or `None` after saying it has the wrong type.
    pub(crate) fn typed<F: DeserializeOwned>(
        &mut self,
        value: &Spanned<DeValue<'_>>,
        key: &str,
        secret: bool,
    ) -> Option<F> {
        match F::deserialize(ValueDeserializer::from(value.clone())) {
            Ok(typed) => Some(typed),
            Err(e) => {
                let at = e.span().map_or(value.span().start, |s| s.start);
                let what = if secret {
                    // A secret of the wrong type is still a secret.
                    "wrong type (the value is not shown)".to_string()
                } else {
                    e.message().trim().to_string()
                };
                let path = self.path;
                self.error(at, &format!("{path}{key}: {what}"));
                None
            }
        }
    }
}

/// Reads every entry of a section through `tables`; an unknown key is reported with the nearest
/// known one.
pub(crate) fn read_section<T>(
    say: &mut Say<'_, '_>,
    entries: &[(String, Spanned<DeValue<'_>>)],
    tables: &[&'static [Key<T>]],
    target: &mut T,
) {
    for (name, value) in entries {
        let key = tables
            .iter()
            .flat_map(|t| t.iter())
            .find(|k| k.name == name);
        match key {
            Some(key) => (key.read)(value, say, target),
            None => {
                let known: Vec<&str> = tables
                    .iter()
                    .flat_map(|t| t.iter())
                    .map(|k| k.name)
                    .collect();
                let message = super::suggest::unknown_key(name, &known);
                let path = say.path;
                say.error(value.span().start, &format!("{path}{name}: {message}"));
            }
        }
    }
}

/// Declares a struct whose fields are config keys, each written once: its doc, type, default,
/// the key that fills it, the key's file type and its [`kinds::Kind`] (range and conversion).
/// Makes the struct, its `Default`, and a table of [`Key`]s for the struct `owner` that holds it
/// (itself, or a larger struct at the path given after `in`). Fields that no key fills follow in
/// an `also { … }` block.
macro_rules! keys {
    (
        $(#[doc = $sdoc:literal])*
        pub struct $Group:ident in $owner:ident $(. $path:ident)? as $KEYS:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident: $ty:ty = $default:expr,
                    from $key:ident: $fty:ty, $kind:expr $(, example $example:literal)?;
            )*
        }
        $(also {
            $( $(#[doc = $xdoc:literal])* $xfield:ident: $xty:ty = $xdefault:expr; )*
        })?
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $Group {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $($( $(#[doc = $xdoc])* pub $xfield: $xty, )*)?
        }

        impl Default for $Group {
            fn default() -> Self {
                $Group {
                    $($field: $default,)*
                    $($($xfield: $xdefault,)*)?
                }
            }
        }

        impl $Group {
            /// The struct within its owner (the struct the key table fills).
            fn within(owner: &$owner) -> &$Group {
                &(*owner)$(.$path)?
            }

            /// The struct within its owner, to fill.
            fn within_mut(owner: &mut $owner) -> &mut $Group {
                &mut (*owner)$(.$path)?
            }

            /// What the struct holds, as its doc comment says it (for the reference page).
            pub const DOC: &'static [&'static str] = &[$($sdoc),*];

            /// Its keys, as the file spells them, in the order the docs list them.
            pub const $KEYS: &'static [$crate::config::key_tables::Key<$owner>] = &[$(
                $crate::config::key_tables::Key {
                    name: stringify!($key),
                    doc: &[$($doc),*],
                    takes: || $crate::config::key_tables::kinds::Kind::<$fty, $ty>::takes(&$kind),
                    shown: |owner: &$owner| {
                        $crate::config::key_tables::kinds::Kind::<$fty, $ty>::show(
                            &$kind,
                            &$Group::within(owner).$field,
                        )
                    },
                    example: $crate::config::key_tables::first_of([$(Some($example),)? None]),
                    secret: || $crate::config::key_tables::kinds::Kind::<$fty, $ty>::secret(&$kind),
                    read: |value, say, owner: &mut $owner| {
                        let kind = $kind;
                        let secret = $crate::config::key_tables::kinds::Kind::<$fty, $ty>::secret(&kind);
                        let Some(file) = say.typed::<$fty>(value, stringify!($key), secret) else {
                            return;
                        };
                        let at = value.span().start;
                        let checked = $crate::config::key_tables::kinds::Kind::<$fty, $ty>::check(
                            &kind, file, at, stringify!($key), say,
                        );
                        if let Some(x) = checked {
                            $Group::within_mut(owner).$field = x;
                        }
                    },
                },
            )*];
        }
    };
}

pub(crate) use keys;

/// The first of `items` that is set (for a macro's optional part).
pub const fn first_of<const N: usize>(items: [Option<&'static str>; N]) -> Option<&'static str> {
    let mut i = 0;
    while i < N {
        if let Some(x) = items[i] {
            return Some(x);
        }
        i += 1;
    }
    None
}
