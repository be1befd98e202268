//! The one word table of each closed-choice key (`on_cooldown`, `https`, `cache`, `controller`,
//! `skip_resources`): the enum's variant names under serde's `snake_case` rule.
//!
//! Every place that shows or reads such a word (the validator, the admin JSON, `courtesy check`,
//! `Proxy-Status` details) goes through [`ConfigWord`], so a word is spelled once, by serde, and a
//! new variant gets its word everywhere at once. This module holds no enum of its own.

use serde::de::value::StrDeserializer;
use serde::ser::{Impossible, Serialize, Serializer};
use serde::Deserialize;

/// A closed set of config words, each one a unit variant of the implementing enum.
///
/// Implementors derive `Serialize` and `Deserialize` with `#[serde(rename_all = "snake_case")]`;
/// that derive is the table, and the methods here only read it.
pub trait ConfigWord: Copy + Serialize + for<'de> Deserialize<'de> + 'static {
    /// Every variant, in the order error messages list them.
    const ALL: &'static [Self];

    /// The word the config file uses for this value.
    fn word(self) -> &'static str {
        // Unit variants always serialize as their name: `ALL` round-trips in the tests.
        self.serialize(VariantName).unwrap_or("")
    }

    /// The value the config word `word` stands for (exact spelling), if any.
    fn from_word(word: &str) -> Option<Self> {
        Self::deserialize(StrDeserializer::<serde::de::value::Error>::new(word)).ok()
    }
}

/// A serializer that only accepts unit variants and yields their (renamed) name.
struct VariantName;

/// Why a value has no config word: it is not a unit variant.
#[derive(Debug)]
struct NotAWord;

impl std::fmt::Display for NotAWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("only unit enum variants have a config word")
    }
}

impl std::error::Error for NotAWord {}

impl serde::ser::Error for NotAWord {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotAWord
    }
}

/// Serializer methods for values that are not words: each one refuses.
macro_rules! not_a_word {
    ($($method:ident($($ty:ty),*);)*) => {
        $(fn $method(self $(, _: $ty)*) -> Result<Self::Ok, NotAWord> {
            Err(NotAWord)
        })*
    };
}

impl Serializer for VariantName {
    type Ok = &'static str;
    type Error = NotAWord;
    type SerializeSeq = Impossible<&'static str, NotAWord>;
    type SerializeTuple = Impossible<&'static str, NotAWord>;
    type SerializeTupleStruct = Impossible<&'static str, NotAWord>;
    type SerializeTupleVariant = Impossible<&'static str, NotAWord>;
    type SerializeMap = Impossible<&'static str, NotAWord>;
    type SerializeStruct = Impossible<&'static str, NotAWord>;
    type SerializeStructVariant = Impossible<&'static str, NotAWord>;

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<&'static str, NotAWord> {
        Ok(variant)
    }

    not_a_word! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_f32(f32);
        serialize_f64(f64);
        serialize_char(char);
        serialize_str(&str);
        serialize_bytes(&[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(&'static str);
    }

    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<&'static str, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<&'static str, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<&'static str, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, NotAWord> {
        Err(NotAWord)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotAWord> {
        Err(NotAWord)
    }
}
