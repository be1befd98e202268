//! The kinds of value a key takes: a number in a range, a whole number, seconds, a word from a
//! closed set… Each [`Kind`] turns the value as the file wrote it into the value courtesy uses,
//! says what is wrong with it in the words `courtesy check` prints, shows a value back as TOML
//! (for the reference page and `config/courtesy.toml`), and says what it takes.
//!
//! Kinds that only one key has (a list of networks, a parent URL, an `off_peak` window) live
//! with that key's section in `validate/`.

use std::time::Duration;

use super::Say;
use crate::config::ConfigWord;

/// How the file's value `F` becomes the value `Out` a setting holds.
pub(crate) trait Kind<F, Out> {
    /// The value, checked; `None` after `say` has been told what is wrong (the setting then keeps
    /// the value it had: the default, or `[defaults]` for a host rule).
    fn check(&self, value: F, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<Out>;

    /// `value` as the file would write it; `None` for "unset".
    fn show(&self, value: &Out) -> Option<toml::Value>;

    /// What the key takes, for the reference page: `0.01 to 1`, `seconds, 0 to 86400`.
    fn takes(&self) -> String;

    /// Whether the value must never be repeated in a message.
    fn secret(&self) -> bool {
        false
    }
}

/// A number in `min..=max`; `unit` follows the bounds in messages (`/s`).
pub(crate) struct Number {
    /// The smallest value allowed.
    pub min: f64,
    /// The largest value allowed.
    pub max: f64,
    /// Written after the bounds: `""`, `"/s"`.
    pub unit: &'static str,
}

/// `min..=max`, without a unit.
pub(crate) const fn between(min: f64, max: f64) -> Number {
    Number { min, max, unit: "" }
}

impl Kind<f64, f64> for Number {
    fn check(&self, x: f64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<f64> {
        if x.is_finite() && x >= self.min && x <= self.max {
            return Some(x);
        }
        let (label, min, max, unit) = (say.label, self.min, self.max, self.unit);
        say.error(
            at,
            &format!("{label}: {key} must be between {min} and {max}{unit}, got {x}"),
        );
        None
    }

    fn show(&self, x: &f64) -> Option<toml::Value> {
        Some(toml::Value::Float(*x))
    }

    fn takes(&self) -> String {
        format!("{} to {}{}", self.min, self.max, self.unit)
    }
}

/// A rate of requests per second: above 0, at most `max`.
pub(crate) struct Rate {
    /// The largest rate allowed.
    pub max: f64,
}

impl Kind<f64, f64> for Rate {
    fn check(&self, x: f64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<f64> {
        if x.is_finite() && x > 0.0 && x <= self.max {
            return Some(x);
        }
        let (label, max) = (say.label, self.max);
        say.error(
            at,
            &format!("{label}: {key} must be > 0 and at most {max} requests per second, got {x}"),
        );
        None
    }

    fn show(&self, x: &f64) -> Option<toml::Value> {
        Some(toml::Value::Float(*x))
    }

    fn takes(&self) -> String {
        format!("requests per second, > 0 and at most {}", self.max)
    }
}

/// A whole number in `min..=max`, held as any integer type it fits.
pub(crate) struct Count {
    /// The smallest value allowed.
    pub min: i64,
    /// The largest value allowed.
    pub max: i64,
}

impl Count {
    fn checked(&self, n: i64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<i64> {
        if (self.min..=self.max).contains(&n) {
            return Some(n);
        }
        let (label, min, max) = (say.label, self.min, self.max);
        say.error(
            at,
            &format!("{label}: {key} must be between {min} and {max}, got {n}"),
        );
        None
    }
}

impl<T: TryFrom<i64> + Copy> Kind<i64, T> for Count
where
    i64: TryFrom<T>,
{
    fn check(&self, n: i64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<T> {
        let n = self.checked(n, at, key, say)?;
        // The range is checked; a type too small for it is a table's mistake, reported as one.
        T::try_from(n).ok().or_else(|| {
            say.error(at, &format!("{key}: {n} does not fit"));
            None
        })
    }

    fn show(&self, n: &T) -> Option<toml::Value> {
        i64::try_from(*n).ok().map(toml::Value::Integer)
    }

    fn takes(&self) -> String {
        format!("{} to {}", self.min, self.max)
    }
}

/// A number of seconds in `min..=max`, held as a `Duration`.
pub(crate) struct Seconds {
    /// The shortest time allowed, in seconds.
    pub min: f64,
    /// The longest time allowed, in seconds.
    pub max: f64,
}

impl Kind<f64, Duration> for Seconds {
    fn check(&self, x: f64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<Duration> {
        if x.is_finite() && x >= self.min && x <= self.max {
            return Some(Duration::from_secs_f64(x));
        }
        let (label, min, max) = (say.label, self.min, self.max);
        say.error(
            at,
            &format!("{label}: {key} must be between {min} and {max} seconds, got {x}"),
        );
        None
    }

    fn show(&self, d: &Duration) -> Option<toml::Value> {
        Some(match d.subsec_nanos() {
            0 => toml::Value::Integer(d.as_secs() as i64),
            _ => toml::Value::Float(d.as_secs_f64()),
        })
    }

    fn takes(&self) -> String {
        format!("seconds, {} to {}", self.min, self.max)
    }
}

/// A number of days in `min..=max`, held as a `Duration`.
pub(crate) struct Days {
    /// The fewest days allowed.
    pub min: f64,
    /// The most days allowed.
    pub max: f64,
}

impl Kind<f64, Duration> for Days {
    fn check(&self, x: f64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<Duration> {
        if x.is_finite() && x >= self.min && x <= self.max {
            return Some(Duration::from_secs_f64(x * 86_400.0));
        }
        let (label, min, max) = (say.label, self.min, self.max);
        say.error(
            at,
            &format!("{label}: {key} must be between {min} and {max} days, got {x}"),
        );
        None
    }

    fn show(&self, d: &Duration) -> Option<toml::Value> {
        let days = d.as_secs_f64() / 86_400.0;
        Some(if days.fract() == 0.0 {
            toml::Value::Integer(days as i64)
        } else {
            toml::Value::Float(days)
        })
    }

    fn takes(&self) -> String {
        format!("days, {} to {}", self.min, self.max)
    }
}

/// A whole number of milliseconds in the range of its [`Count`], held as a `Duration`.
pub(crate) struct Millis(pub Count);

impl Kind<i64, Duration> for Millis {
    fn check(&self, n: i64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<Duration> {
        let ms = self.0.checked(n, at, key, say)?;
        Some(Duration::from_millis(ms.unsigned_abs()))
    }

    fn show(&self, d: &Duration) -> Option<toml::Value> {
        i64::try_from(d.as_millis()).ok().map(toml::Value::Integer)
    }

    fn takes(&self) -> String {
        format!("milliseconds, {} to {}", self.0.min, self.0.max)
    }
}

/// A whole number of MiB in the range of its [`Count`], held as bytes.
pub(crate) struct Mebibytes(pub Count);

impl Kind<i64, u64> for Mebibytes {
    fn check(&self, n: i64, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<u64> {
        let mb = self.0.checked(n, at, key, say)?;
        Some(mb.unsigned_abs() * 1024 * 1024)
    }

    fn show(&self, bytes: &u64) -> Option<toml::Value> {
        i64::try_from(bytes / (1024 * 1024))
            .ok()
            .map(toml::Value::Integer)
    }

    fn takes(&self) -> String {
        format!("MiB, {} to {}", self.0.min, self.0.max)
    }
}

/// `true` or `false`.
pub(crate) struct Flag;

impl Kind<bool, bool> for Flag {
    fn check(&self, b: bool, _: usize, _: &str, _: &mut Say<'_, '_>) -> Option<bool> {
        Some(b)
    }

    fn show(&self, b: &bool) -> Option<toml::Value> {
        Some(toml::Value::Boolean(*b))
    }

    fn takes(&self) -> String {
        "true or false".into()
    }
}

/// One word of a closed set, as its enum value (see [`ConfigWord`]).
pub(crate) struct Word;

impl<T: ConfigWord> Kind<String, T> for Word {
    fn check(&self, word: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<T> {
        let found = T::from_word(&word);
        if found.is_none() {
            let label = say.label;
            say.error(
                at,
                &format!(
                    "{label}: {key} must be one of {}, got {word:?}",
                    quoted_words::<T>()
                ),
            );
        }
        found
    }

    fn show(&self, value: &T) -> Option<toml::Value> {
        Some(toml::Value::String(value.word().to_string()))
    }

    fn takes(&self) -> String {
        format!("one of {}", quoted_words::<T>())
    }
}

/// A key that is unset unless the file sets it: the inner kind's value, or `None`.
pub(crate) struct Maybe<K>(pub K);

impl<F, Out, K: Kind<F, Out>> Kind<F, Option<Out>> for Maybe<K> {
    fn check(&self, value: F, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<Option<Out>> {
        self.0.check(value, at, key, say).map(Some)
    }

    fn show(&self, value: &Option<Out>) -> Option<toml::Value> {
        value.as_ref().and_then(|v| self.0.show(v))
    }

    fn takes(&self) -> String {
        self.0.takes()
    }

    fn secret(&self) -> bool {
        self.0.secret()
    }
}

/// A TOML array of `items`, as a kind shows a list.
pub(crate) fn array(items: impl Iterator<Item = toml::Value>) -> Option<toml::Value> {
    Some(toml::Value::Array(items.collect()))
}

/// Every word of `T`, quoted and separated by commas: `"reject", "hold"`.
pub(crate) fn quoted_words<T: ConfigWord>() -> String {
    let words: Vec<String> = T::ALL.iter().map(|w| format!("{:?}", w.word())).collect();
    words.join(", ")
}
/// The 32 bytes that 64 hex digits spell, or `None` (a `token_sha256`).
pub(crate) fn hex32(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    let ok = hex.len() == 64
        && out.iter_mut().enumerate().all(|(i, byte)| {
            let pair = hex.get(2 * i..2 * i + 2).unwrap_or("");
            u8::from_str_radix(pair, 16).map(|b| *byte = b).is_ok()
        });
    ok.then_some(out)
}
