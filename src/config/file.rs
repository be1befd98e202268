//! Stage one: the file's tables as written, each entry with its place in the file, so that the
//! key tables (`keys`) can read them and every message can name its line. Nothing here knows a
//! key; `read.rs` fills these from the TOML.

use toml::de::DeValue;
use toml::Spanned;

/// One table of the file (`[proxy]`, `[defaults]`, one `[[host]]`): where it starts, and its
/// entries in the file's order.
#[derive(Debug, Default)]
pub(super) struct Section<'t> {
    /// The byte where the table starts, for messages about the table as a whole.
    pub(super) at: usize,
    /// Its keys and their values, as written.
    pub(super) entries: Vec<(String, Spanned<DeValue<'t>>)>,
}

impl<'t> Section<'t> {
    /// The value of `key`, if the table has it.
    pub(super) fn get(&self, key: &str) -> Option<&Spanned<DeValue<'t>>> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Where `key`'s value starts, if the table has it.
    pub(super) fn at(&self, key: &str) -> Option<usize> {
        self.get(key).map(|v| v.span().start)
    }

    /// Takes `key` out of the table (a key read apart from the table's own keys).
    pub(super) fn take(&mut self, key: &str) -> Option<Spanned<DeValue<'t>>> {
        let index = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(index).1)
    }
}

/// The whole file: its sections, each empty when the file leaves it out.
#[derive(Debug, Default)]
pub(super) struct FileConfig<'t> {
    /// `[proxy]`.
    pub(super) proxy: Section<'t>,
    /// `[defaults]`.
    pub(super) defaults: Section<'t>,
    /// Every `[[host]]` rule, in file order.
    pub(super) host: Vec<Section<'t>>,
    /// Every `[[job]]`, in file order.
    pub(super) job: Vec<Section<'t>>,
    /// `[admin]`.
    pub(super) admin: Section<'t>,
    /// `[alerts]`.
    pub(super) alerts: Section<'t>,
    /// `[telemetry]`.
    pub(super) telemetry: Section<'t>,
    /// `[signing]`.
    pub(super) signing: Section<'t>,
    /// `[shared]`, when the file has it (its presence turns the shared budget on).
    pub(super) shared: Option<Section<'t>>,
    /// `include = [...]`: the files whose `[[host]]` and `[[job]]` tables come before this
    /// file's, each with where it is written.
    pub(super) include: Vec<(usize, String)>,
    /// The tables the file has (`proxy`, `host`, …), each with where it starts: an included
    /// file may hold `[[host]]` and `[[job]]` only.
    pub(super) tables: Vec<(String, usize)>,
}
