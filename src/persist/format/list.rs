//! A list inside a record, written straight from the engine's values and read back as the
//! format's own.

use serde::{Deserialize, Serialize};

/// Written from a slice of engine values, each turned into its format form as it is written
/// (no copy of the list is collected on the way out); read as a vector of format values.
/// Both encode as a sequence, so either side reads what the other wrote.
pub enum List<'a, E, F> {
    Write(&'a [E]),
    Read(Vec<F>),
}

impl<'a, E, F: From<&'a E>> List<'a, E, F> {
    /// The format values, whichever way the list was made.
    pub fn into_vec(self) -> Vec<F> {
        match self {
            List::Write(items) => items.iter().map(F::from).collect(),
            List::Read(items) => items,
        }
    }
}

impl<'a, E, F> Serialize for List<'a, E, F>
where
    F: Serialize + From<&'a E>,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            List::Write(items) => serializer.collect_seq(items.iter().map(F::from)),
            List::Read(items) => serializer.collect_seq(items),
        }
    }
}

impl<'de, E, F: Deserialize<'de>> Deserialize<'de> for List<'_, E, F> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(List::Read)
    }
}
