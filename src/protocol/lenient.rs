//! Deserializers that accept what either protocol sends: Query carries every scalar as a string,
//! JSON sends integers as numbers.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;

struct IntVisitor;

impl<'de> Visitor<'de> for IntVisitor {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        i64::try_from(v)
            .map(Some)
            .map_err(|_| E::custom("integer out of range"))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        if v.fract() == 0.0 && v.abs() < 9.0e15 {
            Ok(Some(v as i64))
        } else {
            Err(E::custom(format!("{v} is not an integer")))
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        v.trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| E::custom(format!("{v} is not an integer")))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(IntVisitor)
    }
}

/// An optional integer given as a JSON number or a decimal string.
pub fn int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    d.deserialize_any(IntVisitor)
}
